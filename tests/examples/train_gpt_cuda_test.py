"""train_gpt on the GPU, end to end (ctest train_gpt_cuda, label gpu).

f32 on the GPU follows the CPU's losses (docs/cuda.md: to ~1e-6 a step); activation
checkpointing recomputes on the GPU path with the same bits; optimizer offload to cpu (the
host tier) gives the same bits as without; bf16 learns; two ranks sharing one
GPU (MPI through host memory) follow one rank; --export-hf from the GPU loads on the CPU and
scores what the GPU checkpoint scores.

Without a GPU (or in a build without CUDA) it prints "SKIP: ..." and exits 0, which ctest
reports as skipped.

Run by ctest: python3 train_gpt_cuda_test.py PATH/TO/train_gpt
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

from mpi_launcher import MPI_ENV, MPIRUN, command
from sample_text import write_sample_text

TRAIN_GPT = None
SMALL = ["--n-layer", "2", "--n-head", "2", "--n-embd", "64", "--seq", "32", "--batch", "4",
         "--eval-every", "0", "--warmup", "2", "--lr", "3e-3", "--log-every", "1"]


def run(*args, ranks=0, check=True):
    p = subprocess.run(command(TRAIN_GPT, args, ranks), capture_output=True, text=True, timeout=600, env=MPI_ENV)
    if check and p.returncode != 0:
        raise AssertionError(f"train_gpt {' '.join(args)} exited {p.returncode}:\n{p.stdout}\n{p.stderr}")
    return p


def steps_of(metrics):
    """step -> (loss, grad_norm)."""
    with open(metrics) as f:
        return {j["step"]: (j["loss"], j["grad_norm"]) for j in map(json.loads, f) if "loss" in j}


def gpu_missing():
    """The reason train_gpt cannot run on a GPU here, or None."""
    with tempfile.TemporaryDirectory() as d:
        data = os.path.join(d, "d.txt")
        with open(data, "w") as f:
            f.write("abcdefgh " * 200)
        p = subprocess.run([TRAIN_GPT, "--device", "cuda", "--data", data, *SMALL, "--steps", "1"],
                           capture_output=True, text=True, timeout=300)
    for reason in ("no CUDA device is visible", "has no CUDA support"):
        if p.returncode == 2 and reason in p.stderr:
            return reason
    return None


class TrainGptCuda(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name
        self.data = self.p("data.txt")
        write_sample_text(self.data)

    def tearDown(self):
        self.tmp.cleanup()

    def p(self, name):
        return os.path.join(self.dir, name)

    def steps(self, name, *args, ranks=0):
        m = self.p(name + ".jsonl")
        run("--data", self.data, *SMALL, "--steps", "6", "--metrics", m, *args, ranks=ranks)
        return steps_of(m)

    def test_f32_on_the_gpu_follows_the_cpu(self):
        cpu, gpu = self.steps("cpu", "--device", "cpu"), self.steps("gpu", "--device", "cuda")
        self.assertEqual(sorted(gpu), sorted(cpu))
        # The first step's loss is a forward from the same weights; later steps add the updates'
        # rounding, each step a little more.
        for step, (loss, norm) in cpu.items():
            tol = 1e-6 if step == 1 else 1e-5
            self.assertAlmostEqual(gpu[step][0], loss, delta=tol * loss, msg=f"step {step} loss")
            self.assertAlmostEqual(gpu[step][1], norm, delta=100 * tol * norm, msg=f"step {step} gradient norm")

    def test_activation_checkpointing_on_the_gpu_gives_the_same_bits(self):
        for dtype in ("f32", "bf16"):
            plain = self.steps(f"plain_{dtype}", "--device", "cuda", "--dtype", dtype, "--dropout", "0.1")
            ckpt = self.steps(f"ckpt_{dtype}", "--device", "cuda", "--dtype", dtype, "--dropout", "0.1",
                              "--activation-checkpointing", "1")
            self.assertEqual(ckpt, plain, dtype)

    def test_bf16_on_the_gpu_learns_and_stays_near_f32(self):
        f32, bf16 = self.steps("f32", "--device", "cuda"), self.steps("bf16", "--device", "cuda", "--dtype", "bf16")
        self.assertLess(bf16[6][0], bf16[1][0])
        for step, (loss, _) in f32.items():
            # bf16 keeps 8 bits of mantissa: 2^-8 relative per rounding, a few roundings deep.
            self.assertAlmostEqual(bf16[step][0], loss, delta=0.02 * loss, msg=f"step {step}")

    def test_optimizer_offload_to_cpu_gives_the_same_bits(self):
        # The host's AdamW stands in for the GPU's: losses and gradient norms to the bit, and the
        # run says where the states are.
        for stage, dtype in (("0", "f32"), ("3", "bf16")):
            args = ("--device", "cuda", "--zero-stage", stage, "--dtype", dtype)
            plain = self.steps(f"plain_{stage}", *args)
            m = self.p(f"host_{stage}.jsonl")
            p = run("--data", self.data, *SMALL, "--steps", "6", "--metrics", m, *args, "--offload-optimizer", "cpu")
            self.assertIn("offload: optimizer cpu | rank 0 keeps its masters and Adam moments in host memory", p.stdout)
            self.assertEqual(steps_of(m), plain, f"stage {stage} {dtype}")

    def test_optimizer_offload_to_cpu_beyond_host_memory_is_refused_at_startup(self):
        # A model whose parameters and gradients fit the GPU (8 bytes a parameter) but whose host
        # states (f32: 16 bytes a parameter) do not fit this machine's memory: exit 2 before
        # anything is placed, naming the host's memory.
        with open("/proc/meminfo") as f:
            host = int(next(l for l in f if l.startswith("MemTotal:")).split()[1]) * 1024
        gpu = int(subprocess.run(["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
                                 capture_output=True, text=True).stdout.split()[0]) * 2**20
        C = 8192
        layers = host // (16 * 12 * C * C) + 1  # 12 C^2 parameters a block
        if 8 * 12 * C * C * layers > 0.9 * gpu:
            self.skipTest("no model fits this GPU whose f32 host states exceed this host's memory")
        p = run("--data", self.data, "--device", "cuda", "--n-layer", str(layers), "--n-head", "64", "--n-embd",
                str(C), "--seq", "8", "--batch", "1", "--steps", "1", "--offload-optimizer", "cpu", check=False)
        self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
        self.assertIn("--offload-optimizer cpu: the optimizer states of this machine's 1 rank(s) need", p.stderr)

    @unittest.skipIf(MPIRUN is None, "no mpirun")
    def test_two_ranks_on_one_gpu_follow_one_rank(self):
        one = self.steps("one", "--device", "cuda", "--zero-stage", "3")
        two = self.steps("two", "--device", "cuda", "--zero-stage", "3", "--dist-backend", "mpi", ranks=2)
        for step, (loss, _) in one.items():
            self.assertAlmostEqual(two[step][0], loss, delta=1e-5 * loss, msg=f"step {step}")

    def test_export_from_the_gpu_loads_on_the_cpu(self):
        ck, hf = self.p("ck"), self.p("hf")
        run("--data", self.data, *SMALL, "--steps", "4", "--device", "cuda", "--save", ck, "--export-hf", hf)
        score = ["--data", self.data, *SMALL, "--eval-only", "--eval-batches", "4", "--device", "cpu"]
        self.assertEqual(run("--init-from", hf, *score).stdout, run("--resume", ck, *score).stdout)


if __name__ == "__main__":
    TRAIN_GPT = os.path.abspath(sys.argv.pop(1))
    reason = gpu_missing()
    if reason:
        print(f"SKIP: train_gpt cannot run on a GPU here ({reason})")
        sys.exit(0)
    unittest.main(verbosity=2)
