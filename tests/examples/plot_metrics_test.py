"""scripts/plot_metrics.py on bad input: exit 2 with one line on stderr naming the path, never a
traceback (a missing, directory, binary, empty, unreadable or stepless metrics file; an output
whose directory does not exist); a run's torn last line is skipped with a warning. Good input
(two files overlaid) gives a PNG; train_gpt_cli's test_plot_metrics_draws_the_curves draws real runs.

Run by ctest: python3 plot_metrics_test.py
Writes its own small metrics files in a temporary directory; needs matplotlib.
"""
import json
import os
import shutil
import subprocess
import tempfile
import unittest

from skip_unless_ci import python_with_matplotlib, skip_unless_ci

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "plot_metrics.py")
PNG = b"\x89PNG\r\n\x1a\n"



def metrics_lines(steps):
    """What train_gpt --metrics writes: a config line, step lines, an eval line."""
    lines = [{"type": "config", "n_layer": 2}]
    lines += [{"step": s, "loss": 3.0 - 0.1 * s, "tokens_per_s": 1000.0,
               "mem": {"param": 2**20, "grad": 2**20, "optim": 2**21}} for s in range(1, steps + 1)]
    lines.append({"step": steps, "val_loss": 2.5})
    return "".join(json.dumps(j) + "\n" for j in lines)


class PlotMetrics(unittest.TestCase):
    def setUp(self):
        self.exe = python_with_matplotlib(self)
        self.dir = tempfile.mkdtemp(prefix="plot_metrics_test_")
        self.addCleanup(shutil.rmtree, self.dir)
        # matplotlib's cache here, so that no "created a temporary cache directory" line joins stderr.
        self.env = dict(os.environ, MPLCONFIGDIR=self.dir)

    def p(self, name):
        return os.path.join(self.dir, name)

    def write(self, name, content):
        with open(self.p(name), "wb" if isinstance(content, bytes) else "w") as f:
            f.write(content)
        return self.p(name)

    def plot(self, *args, as_user=(), script=SCRIPT):
        return subprocess.run([*as_user, self.exe, script, *args], capture_output=True, text=True, timeout=120,
                              env=self.env)

    def assertRefused(self, p, path, why):
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertNotIn("Traceback", p.stderr)
        self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
        self.assertIn(path, p.stderr)
        self.assertIn(why, p.stderr)

    def test_two_files_overlaid_make_a_png(self):
        a, b, out = self.write("a.jsonl", metrics_lines(5)), self.write("b.jsonl", metrics_lines(8)), self.p("c.png")
        p = self.plot(a, b, "--out", out)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stderr, "")
        self.assertIn(f"wrote {out}", p.stdout)
        with open(out, "rb") as f:
            self.assertEqual(f.read(8), PNG)

    def test_a_torn_last_line_is_skipped_with_a_warning(self):
        text = metrics_lines(5)
        torn = self.write("torn.jsonl", text + text.splitlines()[2][:17])  # a crash in the middle of a step line
        out = self.p("torn.png")
        p = self.plot(torn, "--out", out)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertNotIn("Traceback", p.stderr)
        self.assertEqual(p.stderr.count("\n"), 1, p.stderr)
        self.assertIn("warning", p.stderr)
        self.assertIn(f"{torn}: skipped line 8,", p.stderr)
        with open(out, "rb") as f:
            self.assertEqual(f.read(8), PNG)

    def test_fields_of_the_wrong_type_are_left_out_not_a_traceback(self):
        # "mem": [1, 2] raised AttributeError, "mem": {"param": "12"} TypeError.
        lines = ['{"type": "config"}', '{"step": 1, "loss": 3.0, "mem": [1, 2]}',
                 '{"step": 2, "loss": 2.9, "mem": {"param": "12", "grad": 1048576}, "tokens_per_s": "fast"}',
                 '{"step": "3", "loss": 2.8}', '{"step": 4, "loss": null}', '{"step": 4, "loss": 2.7}']
        odd, out = self.write("odd.jsonl", "\n".join(lines) + "\n"), self.p("odd.png")
        p = self.plot(odd, "--out", out)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertNotIn("Traceback", p.stderr)
        self.assertIn(f"{odd}: skipped 2 lines from line 4,", p.stderr)
        with open(out, "rb") as f:
            self.assertEqual(f.read(8), PNG)
        only_bad = self.write("only_bad.jsonl", '{"step": "1", "loss": "2"}\n')
        self.assertRefused(self.plot(only_bad, "--out", self.p("bad.png")), only_bad, "has no step lines")

    def test_bad_metrics_files_exit_2_naming_the_file(self):
        good = self.write("good.jsonl", metrics_lines(3))
        cases = [
            (self.p("missing.jsonl"), "No such file or directory"),
            (self.dir, "Is a directory"),
            (self.write("binary.bin", bytes(range(256)) * 64), "has no step lines"),
            (self.write("empty.jsonl", ""), "has no step lines"),
            (self.write("config_only.jsonl", '{"type": "config"}\n{"step": 1, "val_loss": 2.0}\n'), "has no step lines"),
            (self.write("text.txt", "to be or not to be\n[1, 2]\n7\n"), "has no step lines"),
        ]
        for path, why in cases:
            with self.subTest(path=path):
                # Next to a good file, so that a bad one in a list is caught too.
                self.assertRefused(self.plot(good, path, "--out", self.p("bad.png")), path, why)
        self.assertFalse(os.path.exists(self.p("bad.png")))

    def test_an_output_directory_that_does_not_exist_exits_2(self):
        good, out = self.write("good.jsonl", metrics_lines(3)), self.p("no_such_dir/curves.png")
        self.assertRefused(self.plot(good, "--out", out), out, "No such file or directory")

    def test_an_unreadable_file_exits_2(self):
        # Root reads anything: the script runs as nobody (setpriv) so that permissions apply.
        if os.geteuid() == 0 and not shutil.which("setpriv"):
            skip_unless_ci(self, "root without setpriv (util-linux): cannot drop privileges")
        as_user = [] if os.geteuid() != 0 else ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
        os.chmod(self.dir, 0o777)
        script = shutil.copy(SCRIPT, self.p("plot_metrics.py"))  # the checkout may be private to its owner
        os.chmod(script, 0o644)
        secret = self.write("secret.jsonl", metrics_lines(3))
        os.chmod(secret, 0)
        p = self.plot(secret, "--out", self.p("secret.png"), as_user=as_user, script=script)
        self.assertRefused(p, secret, "Permission denied")


if __name__ == "__main__":
    unittest.main()
