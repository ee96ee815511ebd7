"""scripts/plot_walkthrough.py on zero_walkthrough's CSVs: a real run (N = 1, tiny model) draws its
PNGs; CSVs of runs with other flags in one directory are refused rather than drawn as one run
(a rerun of one N with another model used to be drawn next to the other N's old bars, titled
with the old model's Psi); an empty CSV, a CSV of other columns, --ranks 0 and an --out that is
a file exit 2 with one line, never a traceback.

    plot_walkthrough_test.py ZERO_WALKTHROUGH
"""
import csv
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

from skip_unless_ci import python_with_matplotlib

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "plot_walkthrough.py")
WALKTHROUGH = None
TINY = ["--n-layer", "1", "--n-embd", "32", "--n-head", "2", "--seq", "16", "--batch", "4", "--steps", "2"]



class PlotWalkthrough(unittest.TestCase):
    def setUp(self):
        self.exe = python_with_matplotlib(self)
        self.dir = tempfile.mkdtemp(prefix="plot_walkthrough_test_")
        self.addCleanup(shutil.rmtree, self.dir)
        self.env = dict(os.environ, MPLCONFIGDIR=self.dir, OMP_NUM_THREADS="1")

    def walkthrough(self, out, *flags):
        p = subprocess.run([WALKTHROUGH, "--out", out, *TINY, *flags], capture_output=True, text=True, timeout=300,
                           env=self.env)
        self.assertEqual(p.returncode, 0, p.stdout[-2000:] + p.stderr)

    def plot(self, *args):
        return subprocess.run([self.exe, SCRIPT, *args], capture_output=True, text=True, timeout=300, env=self.env)

    def refused(self, p, says):
        self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
        self.assertNotIn("Traceback", p.stderr)
        self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
        self.assertIn(says, p.stderr)

    def test_a_run_draws_and_runs_of_other_flags_are_not_mixed(self):
        out = os.path.join(self.dir, "out")
        self.walkthrough(out, "--cap-mib", "1", "--fit-max-layers", "3")
        p = self.plot("--out", out)
        self.assertEqual(p.returncode, 0, p.stderr)
        for png in ("memory_by_stage.png", "zero3_memory_step.png", "zero3_timeline.png", "largest_model.png"):
            self.assertIn(png, p.stdout)
            self.assertTrue(os.path.getsize(os.path.join(out, png)) > 1000, png)
        # N = 2's CSVs of a run of the same flags (stood in for by N = 1's, relabelled): drawn.
        for kind in ("memory", "fit"):
            shutil.copy(os.path.join(out, f"{kind}_n1.csv"), os.path.join(out, f"{kind}_n2.csv"))
        self.assertEqual(self.plot("--out", out).returncode, 0)
        # N = 1 again with another model and no cap: its own old fit_n1.csv goes, and N = 2's
        # files (the earlier model's) are refused next to it, naming both.
        self.walkthrough(out, "--n-embd", "64", "--cap-mib", "0")
        self.assertFalse(os.path.exists(os.path.join(out, "fit_n1.csv")))
        p = self.plot("--out", out)
        self.refused(p, f"the memory CSVs in {out} come from different runs (N=1: psi ")
        self.assertIn("N=2: psi ", p.stderr)

    def test_bad_csvs_and_flags_exit_2_with_one_line(self):
        out = os.path.join(self.dir, "out")
        self.walkthrough(out)
        with open(os.path.join(out, "memory_n1.csv")) as f:
            header = f.readline()
        with open(os.path.join(out, "memory_n1.csv"), "w") as f:
            f.write(header)  # a run cut short after the header
        self.refused(self.plot("--out", out), "memory_n1.csv holds no rows")
        with open(os.path.join(out, "memory_n1.csv"), "w") as f:
            csv.writer(f).writerows([["n", "stage"], ["1", "ddp"]])
        self.refused(self.plot("--out", out), "memory_n1.csv has no column 'psi'")
        self.refused(self.plot("--run", self.dir, "--ranks", "0", "--out", out), "--ranks takes numbers of ranks")
        a_file = os.path.join(self.dir, "a_file")
        open(a_file, "w").close()
        self.refused(self.plot("--run", os.path.dirname(os.path.dirname(WALKTHROUGH)), "--ranks", "1", "--out", a_file),
                     "is a file, not a directory")


if __name__ == "__main__":
    WALKTHROUGH = os.path.abspath(sys.argv.pop(1))
    unittest.main(verbosity=2)
