"""A small transformer classifier, as `trainmedic plan` and `trainmedic tune` take it:
``build(batch_size)`` returns the model, a batch of inputs, the optimizer and the loss."""

import torch
from torch import nn


class Classifier(nn.Module):
    def __init__(self, vocab=8192, width=256, layers=4, heads=4, classes=10):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        layer = nn.TransformerEncoderLayer(width, heads, 4 * width, batch_first=True, dropout=0.0)
        self.encoder = nn.TransformerEncoder(layer, layers)
        self.head = nn.Linear(width, classes)

    def forward(self, tokens):
        return self.head(self.encoder(self.embed(tokens)).mean(dim=1))


def build(batch_size):
    model = Classifier()
    tokens = torch.randint(0, 8192, (batch_size, 512))
    labels = torch.randint(0, 10, (batch_size,))
    return dict(
        model=model,
        inputs=tokens,
        optimizer=torch.optim.AdamW(model.parameters(), lr=3e-4),
        loss_fn=lambda logits: nn.functional.cross_entropy(logits, labels),
    )
