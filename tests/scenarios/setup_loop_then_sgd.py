"""Compute-bound with no optimizer, after a long set-up loop: the loop clock must move on.

Reproduces pytorch/examples' word_language_model as it runs: the corpus is tokenized word by word
in a plain Python loop (seconds of set-up), then an LSTM language model trains with a hand-written
SGD update (``p.data.add_(p.grad, alpha=-lr)``): no ``optimizer.step()``, no DataLoader, so no
step source. The set-up loop holds the run first and is chosen as "the loop"; once it stops
iterating and the training loop holds the samples, counting must start over on the training
loop (it once read as "data/pool at the tokenizer's line, x10.7").
Fix: none needed -- a healthy CPU run; the report must say compute, at the model's heaviest line.
"""

EXPECT = {"bottleneck": "compute", "kind": "", "loop": "for batch in range(args.batches):"}

import argparse
import random

import torch
from torch import nn

torch.set_num_threads(1)  # stable timings on a small machine

parser = argparse.ArgumentParser()
parser.add_argument("--words", type=int, default=250_000)
parser.add_argument("--batches", type=int, default=40)
args, _ = parser.parse_known_args()

rng = random.Random(0)
vocabulary = [f"w{i}" for i in range(4000)]
text = [rng.choice(vocabulary) for _ in range(args.words)]
word_to_id: dict[str, int] = {}
ids = []
for word in text:  # the tokenizer: set-up, not training
    if word not in word_to_id:
        word_to_id[word] = len(word_to_id)
    ids.append(word_to_id[word])
data = torch.tensor(ids).view(20, -1)


class LanguageModel(nn.Module):
    def __init__(self, tokens, width=128):
        super().__init__()
        self.embed = nn.Embedding(tokens, width)
        self.rnn = nn.LSTM(width, width)
        self.head = nn.Linear(width, tokens)

    def forward(self, x):
        out, _ = self.rnn(self.embed(x))
        return self.head(out)


torch.manual_seed(0)
model = LanguageModel(len(word_to_id))
lr, bptt = 20.0, 35
for batch in range(args.batches):
    i = (batch * bptt) % (data.size(1) - bptt - 1)
    x, y = data[:, i : i + bptt].t(), data[:, i + 1 : i + 1 + bptt].t()
    model.zero_grad()
    loss = nn.functional.cross_entropy(model(x).reshape(-1, len(word_to_id)), y.reshape(-1))
    loss.backward()  # expect-where
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
    for p in model.parameters():
        p.data.add_(p.grad, alpha=-lr)  # the hand-written SGD update
print(f"setup_loop_then_sgd: {args.batches} batches, final loss {loss.item():.3f}")
