"""The text the train_gpt program tests train on: 40 KB of short, repetitive English lines
(learnable in a few steps, enough for a validation split), written into each test's directory."""


def write_sample_text(path):
    lines = [f"the {a} sat on the {b} number {i % 17}.\n" for i, (a, b) in
             enumerate(zip(["cat", "dog", "fox", "owl"] * 300, ["mat", "log", "box", "rug", "hat"] * 240))]
    with open(path, "w") as f:
        f.write("".join(lines))
