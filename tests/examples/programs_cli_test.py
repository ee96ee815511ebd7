"""Every command-line program of zerodl on --help and on bad input: --help prints its usage and
exits 0; a bad flag value or a bad environment variable exits 2 with one line that names the
program, before any work. (train_step_bench and cpu_ops_bench used to end in "terminate called"
on a bad number, ignore --help and run the benchmark; OMP_NUM_THREADS=abc aborted in libomp.)

    programs_cli_test.py NAME=PATH [NAME=PATH ...]
"""
import os
import subprocess
import sys
import unittest

PROGRAMS = {}

# A bad value for one of each program's flags, and what the message says.
BAD_FLAG = {
    "train_gpt": (["--steps", "abc"], "train_gpt: --steps: abc is not a number"),
    "zero_walkthrough": (["--steps", "x"], "zero_walkthrough: --steps: x is not a number"),
    "zero_predict": (["--ranks", "0"], "zero_predict: --ranks"),
    "prepare_tokens": (["--input", "a", "--tokenizer", "b", "--output", "c", "--val-tokens", "-1"],
                       "prepare_tokens: --val-tokens"),
    "train_step_bench": (["--layers", "abc"], "train_step_bench: --layers: abc is not a number"),
    "cpu_ops_bench": (["2", "64,abc"], "cpu_ops_bench: sizes: abc is not a number"),
    "offload_bench": (["--dir"], "offload_bench: every flag takes a value"),
    "consolidate_checkpoint": (["only-one-argument"], "usage: "),
}

# Programs that run OpenMP code: a bad OMP_NUM_THREADS is refused before it starts. The
# arguments are otherwise good, so the environment is what is refused.
OPENMP = {
    "train_gpt": ["--steps", "1"],
    "zero_walkthrough": [],
    "prepare_tokens": ["--input", "a", "--tokenizer", "b", "--output", "c"],
    "train_step_bench": ["--steps", "1"],
    "cpu_ops_bench": ["1", "64"],
    "offload_bench": ["--dir", "."],
    "consolidate_checkpoint": ["ckpt", "out"],
}


def run(name, args, env=None):
    return subprocess.run([PROGRAMS[name], *args], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, **(env or {})))


class ProgramsCli(unittest.TestCase):
    def test_help_prints_the_usage_and_exits_0(self):
        for name in PROGRAMS:
            p = run(name, ["--help"])
            self.assertEqual(p.returncode, 0, f"{name} --help: {p.stdout}{p.stderr}")
            self.assertIn("usage", p.stdout.lower(), f"{name} --help printed: {p.stdout!r}")
            self.assertNotIn("RESULT", p.stdout, name)  # a benchmark did not run instead

    def test_a_bad_flag_value_exits_2_with_one_line(self):
        for name in PROGRAMS:
            args, says = BAD_FLAG[name]
            p = run(name, args)
            self.assertEqual(p.returncode, 2, f"{name} {args}: exit {p.returncode}\n{p.stdout}{p.stderr}")
            self.assertIn(says, p.stderr, name)
            self.assertNotIn("terminate called", p.stderr, name)
            if name not in ("consolidate_checkpoint", "offload_bench"):  # they print their usage too
                self.assertEqual(len(p.stderr.strip().splitlines()), 1, f"{name}: {p.stderr}")

    def test_a_bad_omp_num_threads_exits_2_before_any_work(self):
        for name, args in OPENMP.items():
            if name not in PROGRAMS:
                continue
            for value, says in (("abc", "is not a number of threads"), ("0", "asks for no threads")):
                p = run(name, args, {"OMP_NUM_THREADS": value})
                self.assertEqual(p.returncode, 2, f"{name} OMP_NUM_THREADS={value}: exit {p.returncode}\n{p.stderr}")
                self.assertIn(f"{name}: OMP_NUM_THREADS='{value}' {says}", p.stderr, name)
                self.assertEqual(p.stdout, "", name)


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        name, _, path = arg.partition("=")
        PROGRAMS[name] = path
    missing = set(BAD_FLAG) - set(PROGRAMS)
    if missing:
        sys.exit(f"programs_cli_test.py: give every program: missing {sorted(missing)}")
    unittest.main(argv=sys.argv[:1], verbosity=2)
