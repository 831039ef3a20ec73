"""The wild corpus of benchmarks/wild.py: which public training scripts run, with which small CPU
arguments, the synthetic data each needs, and every injected pitfall as a targeted source edit.

No third-party code lives here: the scripts are extracted from the fetched mirrors at run time,
and each ``Edit`` names the exact text it expects in them (``apply`` fails loudly when that text
is not there exactly once). Lines the harness expects a verdict to point at are found the same
way, by anchor text in the edited source, never by line number.
"""

from __future__ import annotations

import pickle
import sqlite3
import sysconfig
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

# -- edits and anchors -------------------------------------------------------------------------


class EditError(RuntimeError):
    """An anchor was not found exactly once: the upstream source changed."""


@dataclass(frozen=True)
class Edit:
    """Replace ``anchor`` in ``file`` (relative to the extracted tree) by ``text``
    (``how="replace"``), or insert ``text`` right ``"after"`` / ``"before"`` it."""

    file: str
    anchor: str
    text: str
    how: str = "replace"

    def apply(self, root: Path) -> None:
        path = root / self.file
        source = path.read_text(encoding="utf-8")
        count = source.count(self.anchor)
        if count != 1:
            raise EditError(f"{self.file}: anchor {self.anchor!r} found {count} times, expected once")
        new = {"replace": self.text, "after": self.anchor + self.text, "before": self.text + self.anchor}[
            self.how
        ]
        path.write_text(source.replace(self.anchor, new), encoding="utf-8")


@dataclass(frozen=True)
class Lines:
    """Accepted lines: the line where ``anchor`` starts in ``file`` and the ``span - 1`` after it."""

    file: str
    anchor: str
    span: int = 1

    def resolve(self, root: Path) -> list[tuple[str, int]]:
        source = (root / self.file).read_text(encoding="utf-8")
        count = source.count(self.anchor)
        if count != 1:
            raise EditError(f"{self.file}: line anchor {self.anchor!r} found {count} times, expected once")
        start = source.index(self.anchor) + len(self.anchor) - len(self.anchor.lstrip("\n"))
        first = source[:start].count("\n") + 1
        return [(self.file, first + i) for i in range(self.span)]


@dataclass
class Variant:
    name: str
    pitfall: str  # one line for the table's notes
    truth: str  # data | tiny_ops | growth | measure (decided by the measured gain)
    edits: list[Edit] = field(default_factory=list)
    where: list[Lines] = field(default_factory=list)  # the pitfall's lines
    args: list[str] = field(default_factory=list)  # appended to the script's arguments (last wins)
    kind: str | None = None  # the finding kind that names the pitfall, where one is expected
    cuda: bool = False  # also in the CUDA corpus (``--device cuda``)


@dataclass
class Script:
    name: str
    repo: str | None  # mirror folder (owner+name) or None: a script of the harness's own
    paths: list[str]  # what to extract (git archive pathspecs), or own script file names
    cwd: str  # where the script runs, relative to the extracted tree
    entry: str  # the script, relative to cwd
    args: list[str]
    notes: str = ""
    prepare: Callable[[Path], None] | None = None
    base_edits: list[Edit] = field(default_factory=list)  # in every arm (max-batches limits)
    tick: list[Edit] | None = None  # truth runs' step clock; None: the optimizer hook
    nodata: list[Edit] | None = None  # the data-free arm of the as-is ablation
    compute: list[Lines] = field(default_factory=list)  # forward / backward / optimizer lines
    model_files: list[str] = field(default_factory=list)  # every line counts as model time
    needs: list[str] = field(default_factory=list)  # importable modules required
    env: dict[str, str] = field(default_factory=dict)
    pythonpath: list[str] = field(default_factory=list)  # relative to the extracted tree
    standin: bool = True  # the stand-in torchvision on PYTHONPATH (not for the library scripts:
    # torchmetrics, under Lightning, imports torchvision.models whenever a torchvision is found)
    variants: list[Variant] = field(default_factory=list)
    # the arguments on a CUDA machine (``--device cuda``), in place of ``args``; None: CPU only
    cuda_args: list[str] | None = None
    # appended for the CUDA truth's 4x-batch arm (launch-bound or kernel-bound, wild.model_truth)
    cuda_batch4: list[str] | None = None

    def arguments(self, device: str) -> list[str]:
        return self.cuda_args if device == "cuda" and self.cuda_args is not None else self.args

    def on(self, device: str) -> bool:
        return device != "cuda" or self.cuda_args is not None

    def variants_on(self, device: str) -> list[Variant]:
        return [v for v in self.variants if device != "cuda" or v.cuda]


# -- synthetic data ----------------------------------------------------------------------------


def local_text(n_chars: int) -> str:
    """``n_chars`` of ASCII text from this Python's own standard-library sources (sorted, so the
    same on every run of one Python version)."""
    lib = Path(sysconfig.get_paths()["stdlib"])
    parts, total = [], 0
    for path in sorted(lib.glob("*.py")):
        text = path.read_text(encoding="utf-8", errors="replace").encode("ascii", "ignore").decode()
        parts.append(text)
        total += len(text)
        if total >= n_chars:
            break
    return "".join(parts)[:n_chars]


def prepare_nanogpt(root: Path) -> None:
    """``data/shakespeare_char`` as its prepare.py writes it (train.bin / val.bin uint16, meta.pkl),
    from 1 MB of local text, plus what the pitfalls read: input.txt, train.npz, train.db."""
    d = root / "data" / "shakespeare_char"
    text = local_text(1_000_000)
    chars = sorted(set(text))
    stoi = {c: i for i, c in enumerate(chars)}
    itos = dict(enumerate(chars))
    ids = np.array([stoi[c] for c in text], dtype=np.uint16)
    n = int(0.9 * len(ids))
    (d / "input.txt").write_text(text, encoding="utf-8")
    ids[:n].tofile(d / "train.bin")
    ids[n:].tofile(d / "val.bin")
    with open(d / "meta.pkl", "wb") as f:
        pickle.dump({"vocab_size": len(chars), "itos": itos, "stoi": stoi}, f)
    # the np.load pitfall: the training tokens as one compressed array (36M tokens, 72 MB decoded)
    np.savez_compressed(d / "train.npz", tokens=np.tile(ids[:n], 40))
    # the SQL pitfall: one row per 65-token block (block_size 64 + 1), stride 2 (450K rows), no extra index
    con = sqlite3.connect(d / "train.db")
    con.execute("CREATE TABLE blocks (id INTEGER PRIMARY KEY, tokens BLOB)")
    con.executemany(
        "INSERT INTO blocks (tokens) VALUES (?)",
        ((ids[i : i + 65].tobytes(),) for i in range(0, n - 65, 2)),
    )
    con.commit()
    con.close()


def prepare_mingpt(root: Path) -> None:
    (root / "projects" / "chargpt" / "input.txt").write_text(local_text(1_000_000), encoding="utf-8")


def _words(n_words: int) -> list[list[str]]:
    """Lines of words from local text, as wikitext-2's train.txt has them (space-separated)."""
    lines, total = [], 0
    for raw in local_text(8_000_000).splitlines():
        words = raw.replace("(", " ( ").replace(")", " ) ").replace(".", " . ").split()
        if not words:
            continue
        lines.append(words)
        total += len(words) + 1
        if total >= n_words:
            break
    return lines


def prepare_wlm(root: Path) -> None:
    """wikitext-2's train/valid/test.txt (the mirror lists train.txt but does not hold it) from
    local text, ~330K training tokens; and for the pitfalls the training ids as data.Corpus numbers
    them: train_ids.npz (compressed, 16 copies) and train.db (the batchified layout x4, no index)."""
    d = root / "word_language_model" / "data" / "wikitext-2"
    d.mkdir(parents=True, exist_ok=True)
    lines = _words(360_000)
    counts: dict[str, int] = {}
    for words in lines:
        for w in words:
            counts[w] = counts.get(w, 0) + 1
    keep = set(sorted(counts, key=lambda w: (-counts[w], w))[:5000])
    lines = [[w if w in keep else "<unk>" for w in words] for words in lines]
    train, valid, test = lines[: int(len(lines) * 0.9)], lines[int(len(lines) * 0.9) :], lines[:400]
    for name, part in (("train", train), ("valid", valid), ("test", test)):
        (d / f"{name}.txt").write_text("".join(" " + " ".join(w) + " \n" for w in part), encoding="utf-8")
    word2idx: dict[str, int] = {}
    ids = []
    for words in train:
        for w in [*words, "<eos>"]:
            ids.append(word2idx.setdefault(w, len(word2idx)))
    ids_arr = np.array(ids, dtype=np.int64)
    np.savez_compressed(root / "word_language_model" / "train_ids.npz", ids=np.tile(ids_arr, 16))
    bsz = 20
    nbatch = len(ids_arr) // bsz
    layout = ids_arr[: nbatch * bsz].reshape(bsz, -1).T
    # the table holds four such epochs (rows past this one's are never selected, only scanned)
    layout = np.concatenate(
        [layout] + [np.roll(layout, k, axis=0) for k in (1, 2, 3)]
    )  # batchify(): rows are time, columns the batch
    con = sqlite3.connect(root / "word_language_model" / "train.db")
    con.execute("CREATE TABLE batches (row INTEGER, col INTEGER, id INTEGER)")
    con.executemany(
        "INSERT INTO batches VALUES (?, ?, ?)",
        ((r, c, int(layout[r, c])) for r in range(layout.shape[0]) for c in range(bsz)),
    )
    con.commit()
    con.close()


# -- shared pitfall code -----------------------------------------------------------------------

# (f) a heavy per-item transform: a Python loop of NumPy row filters over each image
HEAVY_AUGMENT = """
def heavy_augment(t):  # wild: transform
    a = t.numpy()
    out = a.copy()
    for _pass in range({passes}):
        for c in range(out.shape[0]):
            for r in range(out.shape[1]):
                out[c, r] = 0.8 * out[c, r] + 0.2 * np.convolve(out[c, r], np.ones(3) / 3, mode='same')
    return torch.from_numpy(out)

"""

# (c) a per-sample generator: a handful of tiny torch ops per element, no model
GEN_SAMPLE = """
def gen_sample(n, vocab):  # wild: gen
    tok = torch.randint(vocab, (1,))
    seq = [tok]
    for _ in range(n):
        for _jitter in range(16):
            step = torch.randint(-3, 4, (1,))
            tok = torch.remainder(tok + step, vocab)
        seq.append(tok)
    return torch.cat(seq)

"""

FOR_LOADER_NODATA = "enumerate([next(iter({loader}))] * len({loader}){rest}):\n"


def loader_nodata(file: str, line: str, loader: str, rest: str = "") -> list[Edit]:
    """The data-free arm: the loop runs on the loader's first batch, every step."""
    head = line.split("enumerate(")[0]
    return [Edit(file, line, head + FOR_LOADER_NODATA.format(loader=loader, rest=rest))]


# -- the corpus --------------------------------------------------------------------------------

NG = "train.py"
NG_TRAIN_MEMMAP = "        data = np.memmap(os.path.join(data_dir, 'train.bin'), dtype=np.uint16, mode='r')\n"
NG_IF_TRAIN = "    if split == 'train':\n" + NG_TRAIN_MEMMAP


def nanogpt() -> Script:
    gen_inline = (
        "        _xs = []\n"
        "        for _b in range(batch_size):  # wild: gen-module\n"
        "            _tok = torch.randint(meta['vocab_size'], (1,))\n"
        "            _seq = [_tok]\n"
        "            for _t in range(block_size):\n"
        "                for _jitter in range(16):\n"
        "                    _step = torch.randint(-3, 4, (1,))\n"
        "                    _tok = torch.remainder(_tok + _step, meta['vocab_size'])\n"
        "                _seq.append(_tok)\n"
        "            _xs.append(torch.cat(_seq))\n"
        "        _s = torch.stack(_xs)\n"
        "        X, Y = _s[:, :-1].contiguous(), _s[:, 1:].contiguous()\n"
    )
    return Script(
        name="nanogpt",
        repo="karpathy+nanoGPT",
        paths=["train.py", "model.py", "configurator.py", "data/shakespeare_char"],
        cwd=".",
        entry=NG,
        args=[
            "--device=cpu",
            "--compile=False",
            "--dtype=float32",
            "--block_size=64",
            "--batch_size=12",
            "--n_layer=4",
            "--n_head=4",
            "--n_embd=128",
            "--gradient_accumulation_steps=1",
            "--max_iters=40",
            "--eval_interval=100000",
            "--eval_iters=1",
            "--log_interval=10",
            "--always_save_checkpoint=False",
            "--dataset=shakespeare_char",
        ],
        cuda_args=[
            "--device=cuda",
            "--compile=False",
            "--dtype=bfloat16",
            "--block_size=256",
            "--batch_size=64",
            "--n_layer=6",
            "--n_head=6",
            "--n_embd=384",
            "--gradient_accumulation_steps=1",
            "--max_iters=60",
            "--eval_interval=100000",
            "--eval_iters=1",
            "--log_interval=10",
            "--always_save_checkpoint=False",
            "--dataset=shakespeare_char",
        ],
        cuda_batch4=["--batch_size=256"],
        notes="shakespeare_char synthesised from 1 MB of local text; grad accumulation 1 (default 40); "
        "CUDA: the shakespeare_char config's model size, bf16, no compile",
        prepare=prepare_nanogpt,
        nodata=[
            Edit(
                NG,
                "def get_batch(split):\n",
                "_wild_fixed = {}\n"
                "def get_batch(split):  # wild: nodata\n"
                "    if split not in _wild_fixed:\n"
                "        _wild_fixed[split] = _get_batch(split)\n"
                "    return _wild_fixed[split]\n"
                "def _get_batch(split):\n",
            )
        ],
        compute=[
            Lines(NG, "\n            logits, loss = model(X, Y)\n"),
            Lines(NG, "        scaler.scale(loss).backward()\n"),
            Lines(NG, "        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)\n"),
            Lines(NG, "    scaler.step(optimizer)\n"),
        ],
        model_files=["model.py"],
        variants=[
            Variant(
                "read",
                "get_batch re-reads input.txt and encodes it char by char, every batch",
                "data",
                [
                    Edit(
                        NG,
                        NG_TRAIN_MEMMAP,
                        "        text = open(os.path.join(data_dir, 'input.txt'), encoding='utf-8').read()  "
                        "# wild: read\n"
                        "        data = np.array([meta['stoi'][c] for c in text], dtype=np.uint16)\n",
                    )
                ],
                [Lines(NG, "        text = open(os.path.join(data_dir, 'input.txt')", 2)],
                cuda=True,
            ),
            Variant(
                "npload",
                "get_batch np.load()s the whole compressed token array (train.npz, 36M tokens), every batch",
                "data",
                [
                    Edit(
                        NG,
                        NG_TRAIN_MEMMAP,
                        "        data = np.load(os.path.join(data_dir, 'train.npz'))['tokens']  # wild: npload\n",
                    )
                ],
                [Lines(NG, "        data = np.load(")],
            ),
            Variant(
                "sql",
                "get_batch runs one SQLite query per batch (ORDER BY RANDOM() LIMIT batch_size)",
                "data",
                [
                    Edit(NG, "import pickle\n", "import sqlite3\n", how="after"),
                    Edit(
                        NG,
                        NG_IF_TRAIN,
                        "    if split == 'train':\n"
                        "        con = sqlite3.connect(os.path.join(data_dir, 'train.db'))  # wild: sql\n"
                        "        rows = con.execute('SELECT tokens FROM blocks ORDER BY RANDOM() LIMIT ?', "
                        "(batch_size,)).fetchall()\n"
                        "        con.close()\n"
                        "        b = np.stack([np.frombuffer(r[0], dtype=np.uint16) for r in rows]).astype(np.int64)\n"
                        "        b = torch.from_numpy(b)\n"
                        "        return b[:, :-1].contiguous().to(device), b[:, 1:].contiguous().to(device)\n"
                        + NG_TRAIN_MEMMAP,
                    ),
                ],
                [Lines(NG, "        rows = con.execute(")],
                kind="database",
            ),
            Variant(
                "gen-func",
                "get_batch makes each sample with a per-token loop of tiny torch ops (gen_sample)",
                "tiny_ops",
                [
                    Edit(NG, "def get_batch(split):\n", GEN_SAMPLE, how="before"),
                    Edit(
                        NG,
                        NG_IF_TRAIN,
                        "    if split == 'train':\n"
                        "        s = torch.stack([gen_sample(block_size, meta['vocab_size']) "
                        "for _ in range(batch_size)])\n"
                        "        return s[:, :-1].contiguous(), s[:, 1:].contiguous()\n" + NG_TRAIN_MEMMAP,
                    ),
                ],
                [
                    Lines(NG, "def gen_sample(n, vocab):", 10),
                    Lines(NG, "        s = torch.stack([gen_sample("),
                ],
            ),
            Variant(
                "gen-module",
                "the module-level loop makes each sample with a per-token loop of tiny torch ops",
                "tiny_ops",
                [Edit(NG, "        X, Y = get_batch('train')\n", gen_inline)],
                [Lines(NG, "        _xs = []\n", 12)],
            ),
            Variant(
                "item",
                "loss.item() and print every step (log_interval stays 10)",
                "measure",
                [
                    Edit(
                        NG,
                        "    scaler.update()\n",
                        "    print(f'iter {iter_num}: loss {loss.item():.4f}', flush=True)  # wild: item\n",
                        how="after",
                    )
                ],
                [Lines(NG, "    print(f'iter {iter_num}: loss {loss.item()")],
            ),
            Variant(
                "cat",
                "keeps every step's logits in a torch.cat pool and logs its mean (100 iters)",
                "growth",
                [
                    Edit(
                        NG,
                        "\n            logits, loss = model(X, Y)\n",
                        "            pool = logits.detach() if iter_num == 0 else torch.cat([pool, logits.detach()])"
                        "  # wild: cat\n"
                        "            pool_mean = pool.mean()\n",
                        how="after",
                    )
                ],
                [Lines(NG, "            pool = logits.detach()", 2)],
                args=["--max_iters=100"],
                kind="pool",
            ),
        ],
    )


def mingpt() -> Script:
    ch = "projects/chargpt/chargpt.py"
    tr = "mingpt/trainer.py"
    return Script(
        name="mingpt",
        repo="karpathy+minGPT",
        paths=["mingpt", "projects/chargpt"],
        cwd="projects/chargpt",
        entry="chargpt.py",
        args=[
            "--trainer.device=cpu",
            "--trainer.num_workers=0",
            "--trainer.max_iters=60",
            "--trainer.batch_size=32",
            "--model.model_type=gpt-nano",
            "--data.block_size=64",
        ],
        notes="input.txt = 1 MB of local text; gpt-nano, num_workers 0; iteration 0 samples 500 chars (warm-up)",
        prepare=prepare_mingpt,
        pythonpath=["."],
        nodata=[
            Edit(
                tr,
                "                batch = next(data_iter)\n            except StopIteration:\n",
                "                batch = self._wild_batch if hasattr(self, '_wild_batch') else next(data_iter)"
                "  # wild: nodata\n"
                "                self._wild_batch = batch\n"
                "            except StopIteration:\n",
            )
        ],
        compute=[
            Lines(tr, "            logits, self.loss = model(x, y)\n"),
            Lines(tr, "            self.loss.backward()\n"),
            Lines(
                tr, "            torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_norm_clip)\n"
            ),
            Lines(tr, "            self.optimizer.step()\n"),
            Lines(ch, "    trainer.run()\n"),
        ],
        model_files=["mingpt/model.py"],
        variants=[
            Variant(
                "read",
                "CharDataset.__getitem__ re-reads input.txt and rebuilds its vocabulary for every item",
                "data",
                [
                    Edit(
                        ch,
                        "        chunk = self.data[idx:idx + self.config.block_size + 1]\n",
                        "        text = open('input.txt', 'r').read()  # wild: read\n"
                        "        self.stoi = {ch: i for i, ch in enumerate(sorted(set(text)))}\n"
                        "        chunk = text[idx:idx + self.config.block_size + 1]\n",
                    )
                ],
                [Lines(ch, "        text = open('input.txt', 'r').read()", 2)],
            ),
        ],
    )


EX = "pytorch+examples"


def mnist() -> Script:
    f = "mnist/main.py"
    return Script(
        name="mnist",
        repo=EX,
        paths=["mnist"],
        cwd="mnist",
        entry="main.py",
        args=["--epochs", "1", "--batch-size", "32", "--log-interval", "20", "--no-accel"],
        cuda_args=["--epochs", "1", "--batch-size", "32", "--log-interval", "20"],
        cuda_batch4=["--batch-size", "128"],
        notes="stand-in MNIST (6,000 synthetic items); harness cap: 60 batches per epoch",
        base_edits=[
            Edit(
                f,
                "            if args.dry_run:\n                break\n",
                "        if batch_idx >= 60:  # wild: max-batches\n            break\n",
                how="after",
            )
        ],
        nodata=loader_nodata(
            f, "    for batch_idx, (data, target) in enumerate(train_loader):\n", "train_loader"
        ),
        compute=[
            Lines(f, "\n        output = model(data)\n"),
            Lines(f, "        loss.backward()\n"),
            Lines(f, "        optimizer.step()\n"),
        ],
        variants=[
            Variant(
                "item",
                "--log-interval 1: loss.item() and print every step",
                "measure",
                where=[Lines(f, "            print('Train Epoch: {}", 3)],
                args=["--log-interval", "1"],
            ),
            Variant(
                "transform",
                "a heavy per-item NumPy transform in the Compose, num_workers 0",
                "data",
                [
                    Edit(f, "import torch\n", "import numpy as np\n", how="before"),
                    Edit(f, "def main():\n", HEAVY_AUGMENT.format(passes=12), how="before"),
                    Edit(
                        f,
                        "        transforms.Normalize((0.1307,), (0.3081,))\n        ])\n",
                        "        transforms.Normalize((0.1307,), (0.3081,)),\n"
                        "        transforms.Lambda(heavy_augment),\n        ])\n",
                    ),
                ],
                [Lines(f, "def heavy_augment(t):", 9)],
                kind="transform",
                cuda=True,
            ),
        ],
    )


def vae() -> Script:
    f = "vae/main.py"
    return Script(
        name="vae",
        repo=EX,
        paths=["vae"],
        cwd="vae",
        entry="main.py",
        args=["--epochs", "3", "--batch-size", "128", "--no-accel"],
        cuda_args=["--epochs", "3", "--batch-size", "128"],
        cuda_batch4=["--batch-size", "512"],
        notes="stand-in MNIST (6,000 items, 47 batches an epoch)",
        nodata=loader_nodata(f, "    for batch_idx, (data, _) in enumerate(train_loader):\n", "train_loader"),
        compute=[
            Lines(f, "        recon_batch, mu, logvar = model(data)\n        loss = loss_function("),
            Lines(f, "        loss.backward()\n"),
            Lines(f, "        optimizer.step()\n"),
        ],
        variants=[
            Variant(
                "gen-func",
                "each batch is replaced by per-sample generated images (tiny torch ops per row; 1 epoch)",
                "tiny_ops",
                [
                    Edit(
                        f,
                        "def train(epoch):\n",
                        "def gen_image():  # wild: gen\n"
                        "    rows = []\n"
                        "    for r in range(28):\n"
                        "        phase = torch.rand(1) * 6.28\n"
                        "        row = torch.sin(torch.arange(28) * 0.3 + phase + r * 0.1)\n"
                        "        row = torch.clamp(row * 0.5 + 0.5, 0, 1)\n"
                        "        rows.append(row)\n"
                        "    return torch.stack(rows)\n\n\n",
                        how="before",
                    ),
                    Edit(
                        f,
                        "        data = data.to(device)\n        optimizer.zero_grad()\n",
                        "        data = torch.stack([gen_image() for _ in range(len(data))])[:, None]"
                        "  # wild: gen-call\n",
                        how="before",
                    ),
                ],
                [Lines(f, "def gen_image():", 8), Lines(f, "        data = torch.stack([gen_image()")],
                args=["--epochs", "1"],
            ),
            Variant(
                "cat",
                "keeps every reconstruction in a torch.cat pool (for a figure later)",
                "growth",
                [
                    Edit(
                        f,
                        "        loss = loss_function(recon_batch, data, mu, logvar)\n",
                        "        seen = recon_batch.detach() if batch_idx == 0 and epoch == 1 else "
                        "torch.cat([seen, recon_batch.detach()])  # wild: cat\n",
                        how="after",
                    ),
                    Edit(f, "def train(epoch):\n", "seen = None\n\n\n", how="before"),
                    Edit(f, "    model.train()\n    train_loss = 0\n", "    global seen\n", how="after"),
                ],
                [Lines(f, "        seen = recon_batch.detach()")],
                kind="pool",
            ),
        ],
    )


def mnist_rnn() -> Script:
    f = "mnist_rnn/main.py"
    return Script(
        name="mnist_rnn",
        repo=EX,
        paths=["mnist_rnn"],
        cwd="mnist_rnn",
        entry="main.py",
        args=["--epochs", "1", "--batch-size", "64", "--log-interval", "20"],
        notes="stand-in MNIST (6,000 items, 94 batches)",
        nodata=loader_nodata(
            f, "    for batch_idx, (data, target) in enumerate(train_loader):\n", "train_loader"
        ),
        compute=[
            Lines(f, "\n        output = model(data)\n"),
            Lines(f, "        loss.backward()\n"),
            Lines(f, "        optimizer.step()\n"),
        ],
        variants=[
            Variant(
                "transform",
                "a heavy per-item NumPy transform in the train Compose, num_workers 0",
                "data",
                [
                    Edit(f, "import torch\n", "import numpy as np\n", how="before"),
                    Edit(f, "def main():\n", HEAVY_AUGMENT.format(passes=6), how="before"),
                    Edit(
                        f,
                        "                           transforms.Normalize((0.1307,), (0.3081,))\n"
                        "                       ])),\n        batch_size=args.batch_size,",
                        "                           transforms.Normalize((0.1307,), (0.3081,)),\n"
                        "                           transforms.Lambda(heavy_augment),\n"
                        "                       ])),\n        batch_size=args.batch_size,",
                    ),
                ],
                [Lines(f, "def heavy_augment(t):", 9)],
                kind="transform",
            ),
        ],
    )


DCGAN_ARGS = ["--dataset", "fake", "--workers", "0", "--batchSize", "16", "--ngf", "16", "--ndf", "16"]
DCGAN_ARGS += ["--niter", "1", "--manualSeed", "1", "--outf", "out"]


def dcgan() -> Script:
    f = "dcgan/main.py"
    return Script(
        name="dcgan",
        repo=EX,
        paths=["dcgan"],
        cwd="dcgan",
        entry="main.py",
        args=DCGAN_ARGS,
        notes="stand-in FakeData; workers 0; harness cap: 40 batches; prints 5 .item() a step as-is",
        cuda_args=[*DCGAN_ARGS, "--accel"],
        cuda_batch4=["--batchSize", "64"],
        base_edits=[
            Edit(
                f,
                "        if opt.dry_run:\n            break\n",
                "        if i >= 40:  # wild: max-batches\n            break\n",
                how="after",
            )
        ],
        nodata=loader_nodata(f, "    for i, data in enumerate(dataloader, 0):\n", "dataloader", ", 0"),
        compute=[
            Lines(f, "        output = netD(real_cpu)\n"),
            Lines(f, "        errD_real.backward()\n"),
            Lines(f, "        fake = netG(noise)\n"),
            Lines(f, "        output = netD(fake.detach())\n"),
            Lines(f, "        errD_fake.backward()\n"),
            Lines(f, "        optimizerD.step()\n"),
            Lines(f, "        output = netD(fake)\n"),
            Lines(f, "        errG.backward()\n"),
            Lines(f, "        optimizerG.step()\n"),
        ],
        variants=[
            Variant(
                "transform",
                "a heavy per-item NumPy transform after ToTensor, workers 0",
                "data",
                [
                    Edit(f, "import torch\n", "import numpy as np\n", how="before"),
                    Edit(
                        f,
                        "if opt.dataset in ['imagenet', 'folder', 'lfw']:\n",
                        HEAVY_AUGMENT.format(passes=6),
                        how="before",
                    ),
                    Edit(
                        f,
                        "                            transform=transforms.ToTensor())\n",
                        "                            transform=transforms.Compose([transforms.ToTensor(), "
                        "transforms.Lambda(heavy_augment)]))\n",
                    ),
                ],
                [Lines(f, "def heavy_augment(t):", 9)],
                kind="transform",
                cuda=True,
            ),
        ],
    )


def wlm() -> Script:
    f = "word_language_model/main.py"
    get = "        data, targets = get_batch(train_data, i)\n"
    return Script(
        name="word_language_model",
        repo=EX,
        paths=["word_language_model/main.py", "word_language_model/data.py", "word_language_model/model.py"],
        cwd="word_language_model",
        entry="main.py",
        args=[
            "--model",
            "LSTM",
            "--emsize",
            "64",
            "--nhid",
            "64",
            "--nlayers",
            "1",
            "--epochs",
            "1",
            "--batch_size",
            "20",
            "--bptt",
            "35",
            "--log-interval",
            "50",
            "--lr",
            "20",
        ],
        notes="wikitext-2 synthesised (~330K tokens; the mirror lacks train.txt); harness cap: 60 batches; vocabulary capped at 5,000 words + <unk>; "
        "hand-written SGD update (no optimizer)",
        prepare=prepare_wlm,
        base_edits=[
            Edit(
                f,
                "        if args.dry_run:\n            break\n\n\ndef export_onnx",
                "        if args.dry_run:\n            break\n"
                "        if batch >= 60:  # wild: max-batches\n            break\n\n\ndef export_onnx",
            )
        ],
        tick=[
            Edit(
                f,
                "        total_loss += loss.item()\n",
                "        __import__('_wild_timer').tick()\n",
                how="after",
            )
        ],
        compute=[
            Lines(f, "            output, hidden = model(data, hidden)\n        loss"),
            Lines(f, "        loss.backward()\n"),
            Lines(f, "        torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)\n"),
            Lines(f, "                p.data.add_(p.grad, alpha=-lr)\n"),
        ],
        model_files=["word_language_model/model.py"],
        variants=[
            Variant(
                "npload",
                "each batch np.load()s the whole compressed id array (train_ids.npz) and re-batchifies it",
                "data",
                [
                    Edit(f, "import torch\n", "import numpy as np\n", how="before"),
                    Edit(
                        f,
                        get,
                        "        _src = batchify(torch.from_numpy(np.load('train_ids.npz')['ids']), args.batch_size)"
                        "  # wild: npload\n        data, targets = get_batch(_src, i)\n",
                    ),
                ],
                [Lines(f, "        _src = batchify(")],
            ),
            Variant(
                "sql",
                "each batch is one SQLite query on an unindexed (row, col, id) table",
                "data",
                [
                    Edit(f, "import torch\n", "import sqlite3\n", how="before"),
                    Edit(
                        f,
                        get,
                        "        _con = sqlite3.connect('train.db')\n"
                        "        _rows = _con.execute('SELECT id FROM batches WHERE row >= ? AND row <= ? "
                        "ORDER BY row, col', (i, i + args.bptt)).fetchall()  # wild: sql\n"
                        "        _con.close()\n"
                        "        _t = torch.tensor([r[0] for r in _rows]).view(-1, args.batch_size)\n"
                        "        data, targets = _t[:-1], _t[1:].reshape(-1)\n",
                    ),
                ],
                [Lines(f, "        _rows = _con.execute(")],
                kind="database",
            ),
            Variant(
                "item",
                "--log-interval 1: print every step (loss.item() is every step as-is)",
                "measure",
                where=[Lines(f, "            print('| epoch {:3d}", 4)],
                args=["--log-interval", "1"],
            ),
        ],
    )


# -- the harness's own scripts (benchmarks/wild/scripts), after each library's documented usage --

OWN = Path(__file__).resolve().parent / "scripts"


def own(
    name: str,
    entry: str,
    needs: list[str],
    compute: list[str],
    notes: str,
    env: dict[str, str] | None = None,
    tick: list[Edit] | None = None,
) -> Script:
    return Script(
        name=name,
        repo=None,
        paths=[entry],
        cwd=".",
        entry=entry,
        args=[],
        notes=notes,
        needs=needs,
        standin=False,
        env=env or {},
        tick=tick,
        compute=[Lines(entry, a) for a in compute],
    )


def library_scripts() -> list[Script]:
    return [
        own(
            "lightning",
            "lightning_fit.py",
            ["lightning"],
            ["    trainer.fit(model, loader)\n", "        loss = F.mse_loss(self.net(x), y)\n"],
            "Trainer.fit, an MLP on in-memory tensors, 150 batches",
        ),
        own(
            "hf_trainer",
            "hf_trainer.py",
            ["transformers", "accelerate"],
            ["    trainer.train()\n"],
            "transformers Trainer, a 2-layer GPT-2 built from a config, 60 steps of 8x64 tokens",
        ),
        own(
            "keras",
            "keras_fit.py",
            ["keras"],
            ["    model.fit(x, y, batch_size=128, epochs=2, callbacks=[Tick()], verbose=0)\n"],
            "Keras 3 fit on the torch backend, an MLP, 2 epochs of 94 batches",
            env={"KERAS_BACKEND": "torch"},
        ),
        own(
            "accelerate",
            "accelerate_loop.py",
            ["accelerate"],
            [
                "        out = model(x)\n",
                "        accelerator.backward(loss)\n",
                "        optimizer.step()\n",
            ],
            "accelerate loop (cpu=True), an MLP on a DataLoader, 150 steps",
        ),
    ]


def corpus() -> list[Script]:
    return [nanogpt(), mingpt(), mnist(), vae(), dcgan(), wlm(), mnist_rnn(), *library_scripts()]
