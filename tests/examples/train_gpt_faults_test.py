"""train_gpt under faults and bad input, end to end.

Faults: a rank killed or stopped in the middle of a step (the job ends within the watchdog
timeout, no rank hangs), a process killed while writing a checkpoint and a full disk during a
save (the previous checkpoint still loads and resumes exactly), a crash mid-run (resume is
bit-exact), the data file changed or shortened between save and resume. Bad input: every case
exits 2 with a short message naming the problem, never a crash or a hang.

The faults need no hooks in the product: signals from the test, RLIMIT_FSIZE for writes that
die (SIGXFSZ) or fail (EFBIG, the signal ignored, as on a full disk).

Run by ctest: python3 train_gpt_faults_test.py PATH/TO/train_gpt
Uses a small generated text file in a temporary directory.
"""
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

TRAIN_GPT = None
SMALL = ["--n-layer", "2", "--n-head", "2", "--n-embd", "32", "--seq", "16", "--batch", "4",
         "--eval-every", "0", "--warmup", "2", "--lr", "3e-3"]
from mpi_launcher import MPI_ENV, MPIRUN, command, mpmd
from sample_text import write_sample_text
from skip_unless_ci import skip_unless_ci
# The watchdog timeout of the distributed fault tests, and what the job may take beyond it to end.
TIMEOUT_S = 5
SLACK_S = 25


def losses(path):
    """step -> loss of a metrics file (a line cut short by a kill is skipped)."""
    out = {}
    if not os.path.exists(path):
        return out
    with open(path) as f:
        for line in f:
            try:
                j = json.loads(line)
            except ValueError:
                continue
            if "loss" in j and "step" in j:
                out[j["step"]] = j["loss"]
    return out


def train_state_checksum(layout):
    """dist/checkpoint/sharded_checkpoint.cpp's train_state_checksum of a layout.json (FNV-1a 64, hex)."""
    c = f"step={layout['step']};data_position={layout['data_position']};optimizer_step={layout['optimizer_step']};counters="
    for k in sorted(layout["counters"]):
        c += f"{len(k.encode())}:{k}={layout['counters'][k]};"
    c += "metadata="
    for k in sorted(layout["metadata"]):
        v = layout["metadata"][k]
        c += f"{len(k.encode())}:{k}={len(v.encode())}:{v};"
    h = 0xcbf29ce484222325
    for b in c.encode():
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def limit_file_size(nbytes, ignore_sigxfsz):
    """preexec_fn: files may grow to nbytes; beyond, SIGXFSZ kills the writer (a crash in the
    middle of a write) or, with the signal ignored, write() fails with EFBIG (a full disk)."""
    def apply():
        resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, nbytes))
        if ignore_sigxfsz:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # an ignored disposition survives exec
    return apply


def children_of(root):
    """Every live descendant pid of `root` (from /proc)."""
    parent = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                parent[int(d)] = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            pass
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        kids = [c for c, pp in parent.items() if pp == p]
        out += kids
        todo += kids
    return out


def alive(pid):
    """True unless the process is gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def rank_pids(launcher_pid):
    """rank -> pid of the train_gpt processes under an mpirun."""
    out = {}
    for pid in children_of(launcher_pid):
        try:
            with open(f"/proc/{pid}/comm") as f:
                if f.read().strip() != "train_gpt":
                    continue
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
        except OSError:
            continue
        rank = env.get(b"PMI_RANK") or env.get(b"OMPI_COMM_WORLD_RANK")
        if rank is not None:
            out[int(rank)] = pid
    return out


def wait_until(cond, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


class TrainGptFaults(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name
        self.data = self.p("data.txt")
        write_sample_text(self.data)
        self.procs, self.files, self.ranks = [], [], []

    def tearDown(self):
        # Nothing outlives a test: every process a test started, and everything under it
        # (a stopped rank included: SIGKILL ends stopped processes too).
        for proc in self.procs:
            if proc.poll() is None:  # a test that failed with its job still running
                for pid in children_of(proc.pid) + [proc.pid]:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except OSError:
                        pass
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    pass
        for pid in self.ranks:  # a rank the launcher lost (e.g. left stopped)
            if alive(pid):
                try:
                    with open(f"/proc/{pid}/comm") as f:
                        if f.read().strip() == "train_gpt":
                            os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        for f in self.files:
            f.close()
        self.tmp.cleanup()

    def p(self, name):
        return os.path.join(self.dir, name)

    def run_gpt(self, *args, ranks=0, check=True, timeout=120, preexec_fn=None, env=None):
        cmd = command(TRAIN_GPT, args, ranks)
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=MPI_ENV if env is None else env, preexec_fn=preexec_fn, cwd=self.dir)
        self.procs.append(proc)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for pid in children_of(proc.pid) + [proc.pid]:  # the ranks under mpirun too
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            out, err = proc.communicate()
            raise AssertionError(f"{' '.join(cmd)} still ran after {timeout} s (hang?):\n{out[-3000:]}\n{err[-3000:]}")
        p = subprocess.CompletedProcess(cmd, proc.returncode, out, err)
        if check and p.returncode != 0:
            raise AssertionError(f"{' '.join(cmd)} exited {p.returncode}:\n{p.stdout}\n{p.stderr}")
        return p

    def start(self, *args, ranks=0, name="run"):
        """A background run; stdout and stderr go to files (no pipe to fill up)."""
        cmd = command(TRAIN_GPT, args, ranks)
        out, err = open(self.p(name + ".out"), "w+"), open(self.p(name + ".err"), "w+")
        self.files += [out, err]
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=MPI_ENV, cwd=self.dir)
        self.procs.append(proc)
        return proc

    def output(self, name="run"):
        with open(self.p(name + ".out")) as o, open(self.p(name + ".err")) as e:
            return o.read(), e.read()

    def assert_usage_error(self, p, needles, what=""):
        """Exit 2, at most 2 lines on stderr, each needle in it, no traceback or signal."""
        ctx = f"{what}: exit {p.returncode}\nstdout: {p.stdout[-2000:]}\nstderr: {p.stderr}"
        self.assertEqual(p.returncode, 2, ctx)
        self.assertLessEqual(len(p.stderr.strip().splitlines()), 2, ctx)
        for n in [needles] if isinstance(needles, str) else needles:
            self.assertIn(n, p.stderr, ctx)
        self.assertNotIn("step ", p.stdout, ctx)  # refused before any training

    def checkpoint_step(self, ck):
        with open(os.path.join(ck, "layout.json")) as f:
            return json.load(f)["step"]

    # ---- distributed runs fail instead of hanging ----

    def run_until_steps(self, args, ranks, n_steps, name="run"):
        """Starts a long run (ranks = 0: one process, no mpirun) and returns (proc, {rank: pid})
        once rank 0 logged n_steps steps."""
        metrics = self.p(name + ".jsonl")
        proc = self.start(*args, "--steps", "1000000", "--metrics", metrics, ranks=ranks, name=name)
        wait_until(lambda: len(losses(metrics)) >= n_steps or proc.poll() is not None, 120, f"{n_steps} steps")
        self.assertIsNone(proc.poll(), self.output(name))
        if not ranks:
            return proc, {0: proc.pid}
        pids = wait_until(lambda: (lambda r: r if len(r) == ranks else None)(rank_pids(proc.pid)), 30, "rank pids")
        self.ranks += pids.values()
        return proc, pids

    def wait_job_end(self, proc, pids, limit):
        t0 = time.monotonic()
        try:
            proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            self.fail(f"the job still runs {limit} s after the fault (hang); ranks alive: "
                      f"{[r for r, pid in pids.items() if alive(pid)]}")
        elapsed = time.monotonic() - t0
        wait_until(lambda: not any(alive(pid) for pid in pids.values()), 10, "every rank to exit")
        return elapsed

    @unittest.skipIf(MPIRUN is None, "no mpirun")
    def test_rank_killed_mid_step_ends_every_rank_within_the_timeout(self):
        proc, pids = self.run_until_steps(["--data", self.data, *SMALL, "--collective-timeout", str(TIMEOUT_S)], 2, 3)
        os.kill(pids[1], signal.SIGKILL)
        self.wait_job_end(proc, pids, TIMEOUT_S + SLACK_S)
        self.assertNotEqual(proc.returncode, 0)
        out, err = self.output()
        # The launcher sees the death (its banner), or the survivor's watchdog names the collective.
        self.assertTrue(any(s in out + err for s in ("BAD TERMINATION", "KILLED BY SIGNAL", "watchdog")),
                        f"no clear message:\n{out[-3000:]}\n{err[-3000:]}")

    @unittest.skipIf(MPIRUN is None, "no mpirun")
    def test_stopped_rank_fires_the_watchdog_which_ends_the_job(self):
        # A hung rank (SIGSTOP) is invisible to the launcher: only the other rank's watchdog can
        # end the job. Rank 0 is stopped, so the message must come from rank 1.
        proc, pids = self.run_until_steps(["--data", self.data, *SMALL, "--zero-stage", "3",
                                           "--collective-timeout", str(TIMEOUT_S)], 2, 3)
        os.kill(pids[0], signal.SIGSTOP)
        elapsed = self.wait_job_end(proc, pids, TIMEOUT_S + SLACK_S)
        self.assertNotEqual(proc.returncode, 0)
        self.assertGreaterEqual(elapsed, TIMEOUT_S - 1)
        out, err = self.output()
        self.assertIn("[rank 1/2] watchdog: ", err)
        self.assertIn(f"did not complete within {TIMEOUT_S} s", err)

    # ---- checkpoints survive crashes ----

    def straight_losses(self, steps, stop_after, ranks=0, extra=()):
        m = self.p(f"straight{stop_after}.jsonl")
        self.run_gpt("--data", self.data, *SMALL, "--steps", str(steps), "--stop-after", str(stop_after),
                     "--metrics", m, *extra, ranks=ranks)
        return losses(m)

    def assert_resumes_exactly(self, ck, steps, until, ranks=0, extra=(), resume_extra=None):
        """Resumes `ck` up to step `until` (with `resume_extra` flags, default `extra`) and compares
        every loss with the uninterrupted run (with `extra`)."""
        k = self.checkpoint_step(ck)
        m = self.p("resumed.jsonl")
        if os.path.exists(m):
            os.remove(m)
        self.run_gpt("--resume", ck, "--data", self.data, *SMALL, "--steps", str(steps), "--stop-after", str(until),
                     "--metrics", m, *(extra if resume_extra is None else resume_extra), ranks=ranks)
        resumed, straight = losses(m), self.straight_losses(steps, until, ranks, extra)
        self.assertEqual(sorted(resumed), list(range(k + 1, until + 1)))
        for s in resumed:
            self.assertEqual(resumed[s], straight[s], f"step {s}: resumed {resumed[s]} != uninterrupted {straight[s]}")

    def test_killed_while_writing_a_checkpoint_keeps_the_previous_one(self):
        ck = self.p("ck")
        self.run_gpt("--data", self.data, *SMALL, "--steps", "8", "--stop-after", "2", "--save", ck)
        # The rank file is ~400 KB; 100 KB lets the metrics file grow but not the checkpoint:
        # SIGXFSZ kills the process in the middle of writing it, at the save after step 4.
        p = self.run_gpt("--resume", ck, "--data", self.data, *SMALL, "--steps", "8", "--stop-after", "4",
                         "--save", ck, "--metrics", self.p("killed.jsonl"), check=False,
                         preexec_fn=limit_file_size(100_000, ignore_sigxfsz=False))
        self.assertEqual(p.returncode, -signal.SIGXFSZ, p.stderr)
        self.assertEqual(sorted(losses(self.p("killed.jsonl"))), [3, 4])  # it died saving step 4
        self.assertEqual(self.checkpoint_step(ck), 2)
        staging = self.p(".ck.saving")
        self.assertTrue(os.path.isdir(staging), "the kill should have hit the write in the staging directory")
        # The half-written staging directory is not taken for a checkpoint ...
        bad = self.run_gpt("--resume", staging, "--data", self.data, *SMALL, "--steps", "8", check=False)
        self.assert_usage_error(bad, "layout.json", "resume from the staging directory")
        # ... the previous one resumes exactly, and its next save clears the debris.
        self.assert_resumes_exactly(ck, 8, 8)
        self.run_gpt("--resume", ck, "--data", self.data, *SMALL, "--steps", "8", "--stop-after", "4", "--save", ck)
        self.assertEqual(self.checkpoint_step(ck), 4)
        self.assertFalse(os.path.exists(staging))

    def test_full_disk_during_save_fails_cleanly_and_keeps_the_previous_one(self):
        ck = self.p("ck")
        self.run_gpt("--data", self.data, *SMALL, "--steps", "8", "--stop-after", "2", "--save", ck)
        p = self.run_gpt("--resume", ck, "--data", self.data, *SMALL, "--steps", "8", "--stop-after", "4",
                         "--save", ck, check=False, preexec_fn=limit_file_size(100_000, ignore_sigxfsz=True))
        # A failure during training: exit 1, one message naming the file and the OS error.
        self.assertEqual(p.returncode, 1, p.stderr)
        lines = p.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, p.stderr)
        for needle in ("train_gpt: error:", "save_sharded", "rank-0-of-1.safetensors", "File too large"):
            self.assertIn(needle, lines[0])
        # Nothing left behind: no staging directory, no temporary files.
        self.assertEqual(sorted(os.listdir(self.dir)), ["ck", "data.txt"])
        self.assertEqual(sorted(os.listdir(ck)), ["layout.json", "rank-0-of-1.safetensors"])
        self.assertEqual(self.checkpoint_step(ck), 2)
        self.assert_resumes_exactly(ck, 8, 8)

    def crash_mid_run(self, flags, ranks):
        """A run saving every 2 steps whose rank 0 is SIGKILLed after 5 steps (possibly during a
        save): its checkpoint directory, the step saved last (>= 4, even) and the losses it logged."""
        ck = self.p("ck")
        proc, pids = self.run_until_steps(["--data", self.data, *SMALL, *flags, "--save", ck, "--save-every", "2"],
                                          ranks, 5, name="crash")
        os.kill(pids[0], signal.SIGKILL)
        proc.wait(timeout=TIMEOUT_S + SLACK_S)
        self.assertNotEqual(proc.returncode, 0)
        k = self.checkpoint_step(ck)
        self.assertGreaterEqual(k, 4)
        self.assertEqual(k % 2, 0)
        return ck, k, losses(self.p("crash.jsonl"))

    def test_resume_after_a_crash_mid_run_is_bit_exact(self):
        # SIGKILL of rank 0 at some step after saves every 2 steps (possibly during one): the
        # last complete checkpoint resumes to the same losses as the run that was never killed.
        ranks = 2 if MPIRUN else 0  # run by hand without MPI: the one-process crash (ctest always has MPI)
        extra = ["--zero-stage", "2"] if ranks else []
        ck, k, crashed = self.crash_mid_run(extra, ranks)
        straight = self.straight_losses(1000000, k + 3, ranks, extra)
        for s in range(1, k + 1):  # the killed run was the same trajectory up to its checkpoint
            self.assertEqual(crashed[s], straight[s])
        self.assert_resumes_exactly(ck, 1000000, k + 3, ranks, extra)

    # ---- offload (docs/offload.md) ----

    def offload_flags(self, params=True):
        off = self.p("offload")
        os.makedirs(off, exist_ok=True)
        return ["--zero-stage", "3", "--dtype", "bf16", "--offload-optimizer", "nvme",
                *(["--offload-params", "nvme"] if params else []), "--offload-dir", off]

    def test_offloaded_run_killed_mid_step_resumes_bit_exact_with_or_without_offload(self):
        # SIGKILL of rank 0 of an offloaded run (during a step or a save): the offload files die
        # with the process (nothing left in --offload-dir), the run was the trajectory of the same
        # run without offload, and its last checkpoint resumes exactly with offload and without.
        # The killed run has a window wide enough for every unit: its states are in memory or
        # being written between the steps, when the saves happen.
        ranks = 2 if MPIRUN else 0
        plain = ["--zero-stage", "3", "--dtype", "bf16"]
        off = self.offload_flags() + ["--offload-window-mib", "64"]
        ck, k, crashed = self.crash_mid_run(off, ranks)
        self.assertEqual(os.listdir(self.p("offload")), [], "offload files outlived the killed run")
        straight = self.straight_losses(1000000, k + 3, ranks, plain)
        for s in range(1, k + 1):
            self.assertEqual(crashed[s], straight[s], f"step {s}: offloaded {crashed[s]} != without {straight[s]}")
        for resume_flags in (plain, off):
            self.assert_resumes_exactly(ck, 1000000, k + 3, ranks, plain, resume_extra=resume_flags)

    def test_the_offload_line_says_how_every_rank_moves_its_bytes(self):
        # Direct I/O where the filesystem takes it (probed here the way the store does), the page
        # cache otherwise or when asked; the same on every rank, so the line names one mode.
        off = self.p("offload")
        os.makedirs(off, exist_ok=True)
        probe = os.path.join(off, "probe")
        try:
            os.close(os.open(probe, os.O_CREAT | os.O_WRONLY | os.O_DIRECT, 0o600))
            direct = True
        except OSError:
            direct = False
        finally:
            if os.path.exists(probe):
                os.unlink(probe)
        ranks = 2 if MPIRUN else 0
        base = ["--data", self.data, *SMALL, "--steps", "1", "--zero-stage", "3", "--offload-optimizer", "nvme",
                "--offload-dir", off]
        p = self.run_gpt(*base, ranks=ranks)
        want = "; direct I/O)" if direct else "; through the page cache: the filesystem refuses direct I/O)"
        self.assertIn(want, p.stdout)
        p = self.run_gpt(*base, "--offload-io", "cached", ranks=ranks)
        self.assertIn("; through the page cache)", p.stdout)

    def test_an_offload_dir_on_tmpfs_is_warned_about(self):
        # tmpfs keeps its files in memory: the run goes on, and says that offload frees nothing there.
        shm = "/dev/shm"
        if not os.path.isdir(shm) or subprocess.run(["stat", "-f", "-c", "%T", shm], capture_output=True,
                                                     text=True).stdout.strip() != "tmpfs":
            self.skipTest("no tmpfs at /dev/shm")
        base = ["--data", self.data, *SMALL, "--steps", "1"]
        p = self.run_gpt(*base, "--offload-optimizer", "nvme", "--offload-dir", shm)
        self.assertIn(f"offload: warning: {shm} is on a memory filesystem (tmpfs)", p.stdout)
        p = self.run_gpt(*base, *self.offload_flags())
        self.assertNotIn("memory filesystem", p.stdout)

    def test_bad_offload_flags_and_directories_fail_before_training(self):
        a_file = self.p("a_file")
        with open(a_file, "w") as f:
            f.write("x")
        base = ["--data", self.data, *SMALL, "--steps", "2"]
        for args, needles in [
            (["--offload-optimizer", "nvme"], "needs --offload-dir"),
            (["--offload-optimizer", "nvme", "--offload-dir", self.p("missing")], "is not a directory"),
            (["--offload-optimizer", "nvme", "--offload-dir", a_file], "is not a directory"),
            (["--offload-params", "nvme", "--offload-dir", self.dir], ["--offload-params nvme", "--zero-stage 3"]),
            (["--offload-dir", self.dir], "--offload-dir applies to"),
            (["--offload-io", "cached"], "--offload-io applies to"),
            (["--offload-optimizer", "nvme", "--offload-dir", self.dir, "--offload-io", "mmap"], "--offload-io"),
            (["--offload-optimizer", "disk"], "--offload-optimizer"),
            (["--offload-window-mib", "8"], "needs --offload-optimizer nvme"),
            (["--offload-params", "nvme", "--zero-stage", "3", "--offload-dir", self.dir, "--offload-window-mib", "8"],
             "needs --offload-optimizer nvme"),
            (["--offload-optimizer", "nvme", "--offload-dir", self.dir, "--offload-window-mib", "-1"],
             "--offload-window-mib"),
        ]:
            self.assert_usage_error(self.run_gpt(*base, *args, check=False), needles, " ".join(args))
        # A disk without room for the states (a file-size limit, as a full disk): one message
        # naming the directory when the states are placed, before any step.
        off = self.offload_flags()
        p = self.run_gpt(*base, *off, check=False, preexec_fn=limit_file_size(4096, ignore_sigxfsz=True))
        self.assertIn(p.returncode, (1, 2), p.stderr)
        self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
        self.assertIn(f"the offload directory '{self.p('offload')}' has no room for", p.stderr)
        self.assertNotIn("step ", p.stdout)

    def test_resume_detects_a_changed_or_shorter_data_file(self):
        ck = self.p("ck")
        self.run_gpt("--data", self.data, *SMALL, "--steps", "4", "--stop-after", "2", "--save", ck)
        with open(self.data, "rb") as f:
            original = f.read()
        n = len(original)

        def resume():
            return self.run_gpt("--resume", ck, "--data", self.data, *SMALL, "--steps", "4", check=False)

        # Shorter (still more than a batch), then shorter than one batch: said as such, with sizes.
        for size in (n // 2, 40):
            with open(self.data, "wb") as f:
                f.write(original[:size])
            self.assert_usage_error(resume(), ["data.txt", "shorter", f"{size} bytes now, {n} then", "changed"],
                                    f"truncated to {size}")
        # Longer.
        with open(self.data, "wb") as f:
            f.write(original + b"more\n")
        self.assert_usage_error(resume(), ["longer", f"{n + 5} bytes now, {n} then"], "appended")
        # Same size, one byte changed: the content fingerprint differs.
        with open(self.data, "wb") as f:
            f.write(original[:100] + b"X" + original[101:])
        self.assert_usage_error(resume(), ["data.txt", "changed since the checkpoint", "fnv1a"], "one byte changed")
        # Restored: resumes.
        with open(self.data, "wb") as f:
            f.write(original)
        self.run_gpt("--resume", ck, "--data", self.data, *SMALL, "--steps", "4")

    # ---- bad input: exit 2, a short clear message, never a crash ----

    def test_malformed_flag_values_exit_2(self):
        cases = [
            (["--lr", "nan"], "--lr: 'nan' is not a finite number"),
            (["--lr", "inf"], "--lr: inf is not a finite number"),
            (["--grad-clip", "nan"], "--grad-clip: 'nan' is not a finite number"),
            (["--collective-timeout", "nan"], "--collective-timeout"),
            (["--steps", "99999999999999999999"], "does not fit in 64 bits"),
            (["--seed", "-1"], "--seed: '-1' is negative"),
            (["--steps", "1e3"], "--steps"),
            (["--batch", "0"], "--batch: 0 must be positive"),
            (["--lr", "-1"], "--lr: -1 must not be negative"),
            (["--zero-stage", "4"], "--zero-stage"),
            (["--dtype", "f16"], "--dtype must be f32 or bf16"),
            (["--val-fraction", "0.95"], "--val-fraction"),
            (["--on-nan", "maybe"], "--on-nan"),
            (["--prefetch", "2"], "--prefetch applies to --zero-stage 3 only"),
            # A deadline beyond the clock's range used to wrap around and fail healthy runs at once.
            (["--collective-timeout", "1e10"], "--collective-timeout"),
            (["--collective-timeout", "1e300"], "--collective-timeout"),
        ]
        for args, needle in cases:
            p = self.run_gpt("--data", self.data, *SMALL, "--steps", "2", *args, check=False)
            self.assert_usage_error(p, needle, str(args))
            self.assertLess(len(p.stderr), 400, p.stderr)  # short: no 309-digit DBL_MAX

    def test_bad_data_and_model_configs_exit_2_at_startup(self):
        tiny = self.p("tiny.txt")
        with open(tiny, "w") as f:
            f.write("x" * 60)  # one batch needs 4*16+1 = 65 tokens
        small_val = self.p("small_val.txt")
        with open(small_val, "w") as f:
            f.write("y" * 400)  # train split 360 tokens is enough, val split 40 is not
        empty = self.p("empty.txt")
        open(empty, "w").close()
        cases = [
            (["--data", tiny], ["tiny.txt", "train split has 54 tokens", "one batch needs"]),
            (["--data", small_val, "--eval-every", "2"], ["small_val.txt", "val split has 40 tokens"]),
            (["--data", empty], ["empty.txt", "empty"]),
            (["--n-embd", "30", "--n-head", "4"], "n_embd 30 must be a positive multiple of n_head 4"),
            (["--n-layer", "100000", "--n-embd", "4096", "--n-head", "32"], ["GiB", "more than this machine's"]),
            (["--batch", "4611686018427387904"], ["--batch 4611686018427387904", "more than this machine's"]),
            # A step larger than the data: once a silent run that grew its memory until killed.
            (["--grad-accum", "1000000000"], ["--grad-accum 1000000000", "more than the", "training split"]),
        ]
        for args, needles in cases:
            full = [*SMALL, "--steps", "2", *args] + ([] if "--data" in args else ["--data", self.data])
            t0 = time.monotonic()
            p = self.run_gpt(*full, check=False)
            self.assert_usage_error(p, needles, str(args))
            self.assertLess(time.monotonic() - t0, 20, f"{args}: refused only after {time.monotonic() - t0:.0f} s")

    def test_bad_checkpoints_and_resume_flags_exit_2(self):
        ck = self.p("ck")
        self.run_gpt("--data", self.data, *SMALL, "--steps", "4", "--stop-after", "2", "--save", ck)
        with open(os.path.join(ck, "layout.json")) as f:
            layout = json.load(f)

        def variant(name, edit, fix_checksum=True):
            d = self.p(name)
            shutil.copytree(ck, d)
            j = json.loads(json.dumps(layout))
            edit(j)
            if fix_checksum:  # a consistent layout of another model, not a tampered one
                j["train_state_fnv1a64"] = train_state_checksum(j)
            with open(os.path.join(d, "layout.json"), "w") as f:
                json.dump(j, f)
            return d

        self.assertEqual(train_state_checksum(layout), layout["train_state_fnv1a64"])
        # Plausible edits of the train state shift the trajectory: refused by the checksum.
        tampered = [variant("t_" + k, lambda j, k=k, v=v: j.update({k: v}), fix_checksum=False)
                    for k, v in [("step", 10**18), ("optimizer_step", 1), ("data_position", 0)]]

        newer = variant("newer", lambda j: j.update(format_version=99))

        def other_model(j):  # the config of another model with this model's tensors
            cfg = json.loads(j["metadata"]["config"])
            cfg["n_embd"] = 64
            j["metadata"]["config"] = json.dumps(cfg)
        other = variant("other", other_model)
        truncated = variant("truncated", lambda j: None)
        with open(os.path.join(truncated, "rank-0-of-1.safetensors"), "r+b") as f:
            f.truncate(1000)
        not_ck = self.p("not_a_checkpoint")
        os.mkdir(not_ck)
        with open(os.path.join(not_ck, "notes.txt"), "w") as f:
            f.write("hello\n")
        rank_file = os.path.join(ck, "rank-0-of-1.safetensors")
        cases = [
            (["--resume", newer], ["format_version 99", "newer"]),
            (["--resume", other], ["different model", "wte.weight"]),
            (["--resume", truncated], ["rank-0-of-1.safetensors", "truncated"]),
            (["--resume", not_ck], ["not_a_checkpoint", "layout.json"]),
            (["--init-from", ck], ["--init-from", "is a directory without model.safetensors", "--resume"]),
            (["--init-from", rank_file], ["--init-from", "not a GPT-2 checkpoint"]),
            (["--resume", ck, "--init-from", rank_file], "--init-from and --resume"),
            (["--resume", ck, "--n-embd", "64"], ["--n-embd 64 differs from 32", "checkpoint"]),
            (["--resume", ck, "--n-layer", "3"], "--n-layer 3 differs from 2"),
            (["--resume", ck, "--n-head", "4"], "--n-head 4 differs from 2"),
            (["--resume", ck, "--dropout", "0.2"], "--dropout 0.2 differs from 0"),
            (["--resume", ck, "--seq", "32"], ["--seq 32 exceeds the model's context length 16", "checkpoint"]),
            # Once silently ignored: another seed would change the data order and dropout.
            (["--resume", ck, "--seed", "7"], "--seed 7 differs from the checkpoint's seed 1337"),
            # Once ignored, and the run went on to --steps.
            (["--resume", ck, "--stop-after", "2"], "--stop-after 2 is not after the checkpoint's step 2"),
        ] + [(["--resume", t], ["layout.json", "does not match its checksum"]) for t in tampered]
        for args, needles in cases:  # no model flags but those the case gives
            p = self.run_gpt("--data", self.data, "--seq", "16", "--batch", "4", "--steps", "4", *args, check=False)
            self.assert_usage_error(p, needles, str(args))
        # The flags that match the checkpoint are fine, and so is a shorter --seq.
        self.run_gpt("--resume", ck, "--data", self.data, *SMALL, "--steps", "3")
        # --eval-only of a checkpoint scores its weights (before: a fresh model), on any data.
        fresh = self.run_gpt("--data", self.data, *SMALL, "--eval-only", "--eval-batches", "2").stdout
        trained = self.run_gpt("--resume", ck, "--data", self.data, *SMALL, "--eval-only", "--eval-batches", "2").stdout
        self.assertLess(float(trained.split()[1]), float(fresh.split()[1]) - 0.05, (fresh, trained))

    def test_unwritable_save_and_metrics_paths_exit_2_before_training(self):
        a_file = self.p("a_file")
        with open(a_file, "w") as f:
            f.write("not a directory\n")
        not_ck = self.p("precious")
        os.mkdir(not_ck)
        with open(os.path.join(not_ck, "thesis.tex"), "w") as f:
            f.write("years of work\n")
        cases = [
            (["--save", os.path.join(a_file, "ck")], ["--save", "a_file", "Not a directory"]),
            (["--save", a_file], ["--save", "a_file", "is not a directory"]),
            (["--save", not_ck], ["--save", "precious", "not a zdl checkpoint"]),
            (["--metrics", os.path.join(a_file, "m.jsonl")], ["metrics", "a_file/m.jsonl"]),
        ]
        for args, needles in cases:
            p = self.run_gpt("--data", self.data, *SMALL, "--steps", "1000000", *args, check=False, timeout=60)
            self.assert_usage_error(p, needles, str(args))
        self.assertEqual(os.listdir(not_ck), ["thesis.tex"])  # untouched

    def copies_nobody_can_run(self):
        """train_gpt (zerodl is linked in statically) and the leak sanitizer's suppressions, copied
        into the test's directory, with the environment naming them: user nobody reaches these
        whatever the permissions of the checkout (a clone in /root)."""
        exe = self.p("train_gpt_copy")
        shutil.copy(TRAIN_GPT, exe)
        os.chmod(exe, 0o755)
        env = dict(MPI_ENV)
        lsan = env.get("LSAN_OPTIONS", "")
        m = re.search(r"suppressions=([^:]+)", lsan)
        if m:
            supp = self.p("lsan.supp")
            shutil.copy(m.group(1), supp)
            os.chmod(supp, 0o644)
            env["LSAN_OPTIONS"] = lsan.replace(m.group(1), supp)
        return exe, env

    def test_read_only_checkpoint_directory_is_refused_at_startup_and_left_intact(self):
        # Root may write anywhere: the runs drop to nobody (setpriv) so permissions apply.
        if os.geteuid() == 0 and not shutil.which("setpriv"):
            skip_unless_ci(self, "root without setpriv (util-linux): cannot drop privileges")
        as_user = [] if os.geteuid() != 0 else ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
        os.chmod(self.dir, 0o777)
        exe, env = self.copies_nobody_can_run()
        data = self.p("ro_data.txt")
        shutil.copy(self.data, data)
        os.chmod(data, 0o644)
        ck = self.p("ck_ro")

        def train(*args, check=True):
            cmd = as_user + [exe, "--data", data, *SMALL, *args]
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=self.dir, env=env)
            if check:
                self.assertEqual(p.returncode, 0, p.stderr)
            return p

        # The check itself is also tested in process, as nobody, by
        # CheckpointDir.AnUnwritableCheckpointDirectoryIsRefusedByTheStartupCheck.
        probe = subprocess.run(as_user + [exe, "--help"], capture_output=True, text=True, timeout=60,
                               cwd=self.dir, env=env)
        if probe.returncode != 0:
            skip_unless_ci(self, f"user nobody cannot run {exe}: {probe.stderr.strip()[:200]}")
        train("--steps", "2", "--save", ck)
        def contents():
            out = {}
            for f in os.listdir(ck):
                with open(os.path.join(ck, f), "rb") as fh:
                    out[f] = fh.read()
            return out

        before = contents()
        os.chmod(ck, 0o555)
        try:
            p = train("--steps", "1000000", "--save", ck, check=False)
            self.assert_usage_error(p, ["--save", "ck_ro", "is not writable"], "--save into a read-only checkpoint")
            self.assertEqual(contents(), before)
            self.assertEqual(sorted(f for f in os.listdir(self.dir) if "ck_ro" in f), ["ck_ro"])  # no staging debris
        finally:
            os.chmod(ck, 0o755)
        # Writable again: a save replaces it and leaves nothing beside it.
        train("--resume", ck, "--steps", "3", "--save", ck)
        self.assertEqual(self.checkpoint_step(ck), 3)
        self.assertEqual(sorted(f for f in os.listdir(self.dir) if "ck_ro" in f), ["ck_ro"])

    def test_metrics_write_failure_fails_the_run_naming_the_file(self):
        # A full disk for the metrics log (RLIMIT_FSIZE, SIGXFSZ ignored: write() fails with
        # EFBIG), after its first lines: the run stops with exit 1 and says why.
        metrics = self.p("full.jsonl")
        p = self.run_gpt("--data", self.data, *SMALL, "--steps", "50", "--metrics", metrics, check=False,
                         preexec_fn=limit_file_size(1500, ignore_sigxfsz=True))
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("cannot write the metrics file", p.stderr)
        self.assertIn("full.jsonl", p.stderr)
        self.assertNotIn("step    50/50", p.stdout)

    @unittest.skipIf(MPIRUN is None, "no mpirun")
    def test_bad_input_under_mpirun_exits_2_on_every_rank_printed_once(self):
        ck = self.p("ck2")
        self.run_gpt("--data", self.data, *SMALL, "--steps", "4", "--stop-after", "2", "--save", ck, ranks=2)
        os.mkdir(self.p("m.rank1.jsonl"))  # only rank 1 cannot open its metrics file
        cases = [
            (3, ["--data", self.data, "--steps", "2"], "--batch 4 must be divisible by the number of ranks 3"),
            # A 2-rank checkpoint resumed on 3 ranks with a batch that 3 ranks cannot split.
            (3, ["--resume", ck, "--data", self.data, "--steps", "4"], "--batch 4 must be divisible"),
            (2, ["--data", self.data, "--steps", "1000000", "--metrics", self.p("m.jsonl"), "--metrics-all-ranks"],
             "cannot open metrics file"),
            (2, ["--data", self.data, "--steps", "1000000", "--save", os.path.join(self.data, "ck")], "--save"),
        ]
        for ranks, args, needle in cases:
            t0 = time.monotonic()
            p = self.run_gpt(*SMALL, *args, "--collective-timeout", "60", ranks=ranks, check=False, timeout=90)
            self.assert_usage_error(p, needle, f"-np {ranks} {args}")
            self.assertEqual(p.stderr.count("train_gpt:"), 1, p.stderr)
            self.assertLess(time.monotonic() - t0, 30, f"{args}: a rank waited for the others")

    def run_mpmd(self, args0, args1, timeout=90):
        """Two ranks started with different arguments (MPMD: `mpirun -np 1 A : -np 1 B`)."""
        cmd = mpmd(TRAIN_GPT, args0, args1)
        t0 = time.monotonic()
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=MPI_ENV,
                              cwd=self.dir, timeout=timeout)
        return proc, time.monotonic() - t0

    @unittest.skipIf(MPIRUN is None, "no mpirun")
    def test_ranks_started_with_different_flags_exit_2_naming_the_flag_and_both_values(self):
        base = ["--data", self.data, *SMALL, "--steps", "3"]
        cases = [
            (["--n-embd", "32"], ["--n-embd", "16"], "ranks disagree on --n-embd: rank 0 has 32, rank 1 has 16"),
            (["--seed", "1"], ["--seed", "2"], "ranks disagree on --seed: rank 0 has 1, rank 1 has 2"),
            (["--lr", "1e-3"], ["--lr", "2e-3"], "ranks disagree on --lr"),
            (["--grad-accum", "1"], ["--grad-accum", "2"], "ranks disagree on --grad-accum"),
            (["--zero-stage", "1"], ["--zero-stage", "3"], "ranks disagree on --zero-stage"),
            ([], ["--save", self.p("ck_one_rank")], "ranks disagree on --save: rank 0 has (not given), rank 1 has (a path)"),
        ]
        for extra0, extra1, needle in cases:
            p, took = self.run_mpmd(base + extra0, base + extra1)
            self.assert_usage_error(p, needle, f"{extra0} vs {extra1}")
            self.assertLess(took, 30, f"{extra0} vs {extra1}")
        self.assertFalse(os.path.exists(self.p("ck_one_rank")))

    def test_data_file_truncated_during_the_run_is_an_error_not_sigbus(self):
        data = self.p("shrinking.txt")
        shutil.copy(self.data, data)
        proc, pids = self.run_until_steps(["--data", data, *SMALL], 0, 3)
        os.truncate(data, 200)
        self.wait_job_end(proc, pids, 60)
        out, err = self.output()
        self.assertEqual(proc.returncode, 1, err[-2000:])  # an error, not a signal (SIGBUS: -7)
        self.assertIn("changed during the run", err)

    def test_fifo_as_data_init_or_checkpoint_is_refused_without_waiting(self):
        fifo = self.p("pipe")
        os.mkfifo(fifo)
        ck = self.p("ck_fifo")
        os.mkdir(ck)
        os.mkfifo(os.path.join(ck, "layout.json"))
        for args, needle in [(["--data", fifo], "not a regular file"), (["--init-from", fifo], "not a regular file"),
                             (["--resume", ck, "--data", self.data], "not a regular file")]:
            p = self.run_gpt(*SMALL, "--steps", "2", *args, check=False, timeout=30)
            self.assert_usage_error(p, needle, str(args))

    @unittest.skipIf(MPIRUN is None, "no mpirun")
    def test_bad_input_on_one_rank_ends_every_rank_with_that_ranks_message(self):
        other = self.p("other.txt")
        with open(self.data) as src, open(other, "w") as f:  # the same size, other bytes
            f.write(src.read()[::-1])
        base = [*SMALL, "--steps", "3"]
        cases = [
            (["--data", self.data], ["--data", self.p("nonexistent")], "--data: no file"),
            (["--data", self.data], ["--data", other], "ranks disagree on the data: rank 0 read"),
        ]
        for args0, args1, needle in cases:
            p, took = self.run_mpmd(base + args0, base + args1)
            self.assert_usage_error(p, needle, f"{args0} vs {args1}")
            self.assertLess(took, 30, f"{args1}: a rank waited for the other")

    @unittest.skipIf(MPIRUN is None, "no mpirun")
    def test_a_failure_every_rank_hits_alone_is_printed_once(self):
        # Out of memory in the same allocation on both ranks (no collective agrees on it) and a
        # full disk during a save (agreed): exit 1, the message exactly once, with its rank. The
        # ranks' report files go to a temporary directory of this test's (TMPDIR), which must be
        # left empty; the system's would also see other runs' files.
        tmp = self.p("tmp")
        os.mkdir(tmp)
        env = dict(MPI_ENV, TMPDIR=tmp)
        for _ in range(3):
            p = self.run_gpt("--data", self.data, *SMALL, "--steps", "50", "--max-memory-per-rank", "700000",
                             ranks=2, check=False, env=env)
            self.assertEqual(p.returncode != 0, True, p.stderr)
            self.assertEqual(p.stderr.count("out of memory on cpu"), 1, p.stderr)
            self.assertRegex(p.stderr, r"train_gpt: error: \[rank [01]/2\] out of memory")
        self.assertEqual(os.listdir(tmp), [])

    @unittest.skipIf(MPIRUN is None, "no mpirun")
    def test_checkpoint_error_only_one_rank_sees_is_shown_with_its_reason(self):
        # Ranks on different hosts read their own copies of a checkpoint (paths may differ): a
        # copy corrupted where only rank 1 reads is reported by rank 0 with rank 1's reason.
        ck = self.p("ck_local")
        self.run_gpt("--data", self.data, *SMALL, "--steps", "2", "--save", ck, ranks=2)
        bad = self.p("ck_local_copy")
        shutil.copytree(ck, bad)
        shard = os.path.join(bad, "rank-1-of-2.safetensors")
        with open(shard, "r+b") as f:
            f.seek(-100, os.SEEK_END)
            byte = f.read(1)
            f.seek(-100, os.SEEK_END)
            f.write(bytes([byte[0] ^ 0xFF]))
        base = ["--data", self.data, *SMALL, "--steps", "4"]
        p, took = self.run_mpmd(base + ["--resume", ck], base + ["--resume", bad])
        self.assert_usage_error(p, ["--resume", "[rank 1/2] load_sharded", "ck_local_copy/rank-1-of-2.safetensors",
                                    "is corrupted"], "a shard only rank 1 reads")
        self.assertLess(took, 30)

    # ---- a checkpoint directory has one owner ----

    def test_a_second_run_on_the_same_save_directory_is_refused_naming_the_first(self):
        ck = self.p("ck_shared")
        lock = self.p(".ck_shared.lock")
        first = self.start("--data", self.data, *SMALL, "--steps", "1000000", "--save", ck, "--save-every", "1",
                           name="first")
        wait_until(lambda: os.path.exists(lock) and os.path.getsize(lock) > 0, 60, "the first run's lock")
        for ranks in (0, 2):  # alone, and under mpirun (rank 0 holds the lock; every rank exits 2)
            p = self.run_gpt("--data", self.data, *SMALL, "--steps", "4", "--save", ck, ranks=ranks, check=False,
                             timeout=60)
            self.assert_usage_error(p, ["--save", "ck_shared' is in use by another run", f"pid {first.pid},",
                                        "host '"], f"a second run on the same --save ({ranks} ranks)")
        self.assertIsNone(first.poll(), "the first run goes on")
        wait_until(lambda: os.path.exists(os.path.join(ck, "layout.json")), 60, "the first run's checkpoint")
        first.kill()  # however it ends, the kernel releases its lock
        first.wait()
        self.run_gpt("--data", self.data, *SMALL, "--steps", "2", "--save", ck)
        self.assertFalse(os.path.exists(lock), "a run that ends normally removes its lock file")
        self.assertEqual(self.checkpoint_step(ck), 2)

    def test_a_save_keeps_an_export_and_a_users_files_in_its_directory(self):
        ck = self.p("ck_mixed")
        self.run_gpt("--data", self.data, *SMALL, "--steps", "2", "--save", ck, "--export-hf", ck)
        with open(os.path.join(ck, "NOTES.txt"), "w") as f:
            f.write("run 1: lr 3e-3\n")
        os.makedirs(os.path.join(ck, "eval_results"))
        with open(os.path.join(ck, "eval_results", "val.json"), "w") as f:
            f.write("{}\n")
        before = {}
        for name in ("model.safetensors", "config.json", "NOTES.txt", "eval_results/val.json"):
            with open(os.path.join(ck, name), "rb") as f:
                before[name] = f.read()
        self.run_gpt("--data", self.data, *SMALL, "--steps", "4", "--resume", ck, "--save", ck, "--save-every", "1",
                     ranks=2)
        self.assertEqual(self.checkpoint_step(ck), 4)
        for name, data in before.items():
            with open(os.path.join(ck, name), "rb") as f:
                self.assertEqual(f.read(), data, f"{name} after two more saves")
    # ---- --export-hf and --init-from directories ----

    def export_fails_at_the_end(self, name, *extra):
        """A run whose --export-hf parent is removed while it trains: (exit code, stderr)."""
        parent = self.p("gone_" + name)
        os.makedirs(parent)
        m = self.p(name + ".jsonl")
        proc = self.start("--data", self.data, *SMALL, "--steps", "1000", "--metrics", m,
                          "--export-hf", os.path.join(parent, "hf"), *extra, name=name)
        wait_until(lambda: len(losses(m)) >= 1 or proc.poll() is not None, 60, "a step")
        shutil.rmtree(parent)
        rc = proc.wait(timeout=300)
        return rc, self.output(name)[1]

    def test_an_export_that_fails_at_the_end_keeps_the_model(self):
        # Without --save the model exists only in memory: it is written elsewhere, and said where.
        rc, err = self.export_fails_at_the_end("nosave")
        self.assertEqual(rc, 1, err)
        last = err.strip().splitlines()[-1]
        for needle in ("--export-hf", "failed", "does not exist", "the model was written to '"):
            self.assertIn(needle, last)
        rescued = last.split("the model was written to '")[1].split("'")[0]
        self.assertEqual(os.path.dirname(rescued), self.dir, "in the working directory")
        self.assertEqual(sorted(os.listdir(rescued)), ["config.json", "model.safetensors"])
        p = self.run_gpt("--init-from", rescued, "--data", self.data, *SMALL, "--eval-only", "--eval-batches", "2")
        self.assertLess(float(p.stdout.split()[-1]), 4.0, "the trained model (a fresh one scores ln 256 = 5.5)")
        # With --save the final checkpoint holds it: the message says so and how to export it.
        rc, err = self.export_fails_at_the_end("saved", "--save", self.p("ck_exp"))
        self.assertEqual(rc, 1, err)
        self.assertIn("consolidate_checkpoint " + self.p("ck_exp"), err)
        self.assertEqual(self.checkpoint_step(self.p("ck_exp")), 1000)

    def test_init_from_a_directory_reads_and_checks_its_config_json(self):
        hf = self.p("hf")
        self.run_gpt("--data", self.data, *SMALL, "--steps", "2", "--export-hf", hf)
        i = SMALL.index("--n-head")
        no_head = SMALL[:i] + SMALL[i + 2:]
        score = ["--data", self.data, "--eval-only", "--eval-batches", "2"]
        # n_head comes from config.json (the flag's default, 4, would be another model).
        self.assertEqual(self.run_gpt("--init-from", hf, *score, *no_head).stdout,
                         self.run_gpt("--init-from", hf, *score, *SMALL).stdout)
        edits = [("n_embd", 128), ("n_layer", 10**9), ("n_head", 1), ("activation_function", "relu"),
                 ("layer_norm_epsilon", 0.5), ("n_positions", 1024), ("vocab_size", 50257),
                 ("tie_word_embeddings", False), ("n_head", None)]
        for key, value in edits:
            d = self.p(f"hf_{key}_{value}")
            shutil.copytree(hf, d)
            with open(os.path.join(d, "config.json")) as f:
                config = json.load(f)
            if value is None:
                del config[key]
            else:
                config[key] = value
            with open(os.path.join(d, "config.json"), "w") as f:
                json.dump(config, f)
            p = self.run_gpt("--init-from", d, *score, *no_head, check=False)
            self.assert_usage_error(p, ["--init-from", "config.json", key], f"config.json with {key} = {value}")
        os.remove(os.path.join(d, "config.json"))
        self.assert_usage_error(self.run_gpt("--init-from", d, *score, *no_head, check=False), "no config.json")
        p = self.run_gpt("--init-from", hf, *score, *no_head, "--n-head", "4", check=False)
        self.assert_usage_error(p, "--n-head 4 differs from 2 in " + os.path.join(hf, "config.json"))

    # ---- Ctrl-C and SIGTERM stop at a step boundary, saved ----

    def interrupted_run(self, name, ranks, send):
        """A long run signalled by `send(proc)` after 3 steps; (exit code, its metrics records, ck)."""
        ck, m = self.p("ck_" + name), self.p(name + ".jsonl")
        proc = self.start("--data", self.data, *SMALL, "--steps", "1000000", "--save", ck, "--save-every", "100000",
                          "--metrics", m, ranks=ranks, name=name)
        wait_until(lambda: len(losses(m)) >= 3, 60, "three steps")
        send(proc)
        rc = proc.wait(timeout=60)
        with open(m) as f:
            recs = [json.loads(line) for line in f]
        return rc, recs, ck

    def assert_stopped_saved_and_resumable(self, recs, ck, sig, ranks=0):
        last = recs[-1]
        self.assertEqual((last.get("type"), last.get("signal"), last.get("saved")), ("interrupted", sig, True), last)
        step = last["step"]
        self.assertEqual(max(s for s in (r.get("step", 0) for r in recs if "loss" in r)), step, "no step after it")
        self.assertEqual(self.checkpoint_step(ck), step, "saved at the step it stopped after")
        # Resuming continues the uninterrupted trajectory exactly: on as many ranks as the
        # interrupted run, since SMALL's --batch on another world size cuts other micro-batches
        # (bit-identical only with the recipe of docs/exactness.md).
        common = ["--data", self.data, *SMALL, "--steps", "1000000", "--stop-after", str(step + 3)]
        self.run_gpt(*common, "--resume", ck, "--metrics", self.p("resumed.jsonl"), ranks=ranks)
        self.run_gpt(*common, "--metrics", self.p("straight.jsonl"), ranks=ranks)
        straight = losses(self.p("straight.jsonl"))
        self.assertEqual(losses(self.p("resumed.jsonl")), {s: straight[s] for s in range(step + 1, step + 4)})

    def test_ctrl_c_saves_after_the_step_and_exits_130(self):
        rc, recs, ck = self.interrupted_run("int", 0, lambda p: p.send_signal(signal.SIGINT))
        self.assertEqual(rc, 130)
        with open(self.p("int.out")) as f:
            self.assertIn(f"interrupted (SIGINT) after step {recs[-1]['step']}: checkpoint saved", f.read())
        with open(self.p("int.err")) as f:
            err = f.read().strip().splitlines()
        self.assertEqual(len(err), 1, err)  # the acknowledgement
        self.assertIn("interrupted: stopping after this step, saving to", err[0])
        self.assertFalse(any(n.startswith(".ck_int") for n in os.listdir(self.dir)), "no staging debris, no lock")
        self.assert_stopped_saved_and_resumable(recs, ck, "SIGINT")

    def test_sigterm_to_one_rank_stops_every_rank_saved_exit_143(self):
        def term_rank_1(proc):
            os.kill(wait_until(lambda: rank_pids(proc.pid).get(1), 30, "rank 1"), signal.SIGTERM)
        rc, recs, ck = self.interrupted_run("term", 2, term_rank_1)
        self.assertEqual(rc, 143)
        self.assert_stopped_saved_and_resumable(recs, ck, "SIGTERM", ranks=2)

    def test_ctrl_c_to_the_launcher_stops_every_rank_saved(self):
        # MPICH's mpiexec forwards the Ctrl-C to every rank. Its own exit code is not asserted:
        # mpiexec 4.0 sometimes reports 0 after a forwarded Ctrl-C even when every rank exits 130
        # (seen with ranks that are two-line scripts); the metrics line is what scripts can trust.
        rc, recs, ck = self.interrupted_run("mpint", 2, lambda p: p.send_signal(signal.SIGINT))
        self.assert_stopped_saved_and_resumable(recs, ck, "SIGINT", ranks=2)

    def test_a_sigterm_to_the_launcher_and_its_ranks_stops_them_saved(self):
        # A scheduler's SIGTERM reaches every process of the job: each rank gets it directly and
        # again from mpiexec, milliseconds apart. That is one request to stop, not two (the
        # second used to end the ranks at once, unsaved).
        def term_all(proc):
            pids = [wait_until(lambda r=r: rank_pids(proc.pid).get(r), 30, f"rank {r}") for r in (0, 1)]
            for pid in [proc.pid, *pids]:
                os.kill(pid, signal.SIGTERM)
        rc, recs, ck = self.interrupted_run("termall", 2, term_all)
        self.assert_stopped_saved_and_resumable(recs, ck, "SIGTERM", ranks=2)

    def test_a_signal_while_sampling_ends_the_run_at_once(self):
        # Training is over and saved; the sample saves nothing, so the first signal ends it (it
        # used to be taken as a request to stop "after this step", and the sample went on).
        ck, m = self.p("ck_sample"), self.p("sample.jsonl")
        proc = self.start("--data", self.data, *SMALL, "--steps", "2", "--save", ck, "--sample", "100000000",
                          "--metrics", m, name="sample")
        wait_until(lambda: len(losses(m)) >= 2 and os.path.exists(os.path.join(ck, "layout.json")), 60, "the save")
        proc.send_signal(signal.SIGTERM)
        # Killed by the signal; 143 if it landed in the instant between the save and the sample.
        self.assertIn(proc.wait(timeout=30), (-signal.SIGTERM, 143))
        self.assertEqual(self.checkpoint_step(ck), 2)

    def test_a_second_signal_stops_at_once(self):
        ck, m = self.p("ck_twice"), self.p("twice.jsonl")
        proc = self.start("--data", self.data, *SMALL, "--steps", "1000000", "--save", ck, "--save-every", "1",
                          "--metrics", m, name="twice")
        wait_until(lambda: len(losses(m)) >= 3, 60, "three steps")
        # Both arrive together when it continues: whichever comes first is the request, the other
        # ends the process as that signal does by default (no save, no exit 130/143).
        proc.send_signal(signal.SIGSTOP)
        proc.send_signal(signal.SIGINT)
        proc.send_signal(signal.SIGTERM)
        proc.send_signal(signal.SIGCONT)
        self.assertIn(proc.wait(timeout=60), (-signal.SIGINT, -signal.SIGTERM))
        self.assertNotIn("interrupted", "".join(open(m).read().splitlines()[-1:]))
        self.assertGreaterEqual(self.checkpoint_step(ck), 2, "the last checkpoint is intact (3 steps were seen)")

if __name__ == "__main__":
    TRAIN_GPT = os.path.abspath(sys.argv.pop(1))
    unittest.main(verbosity=2)
