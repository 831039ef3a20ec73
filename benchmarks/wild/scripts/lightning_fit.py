"""Lightning ``Trainer.fit`` on a small demo model (an MLP regressor on in-memory tensors), as the
Lightning docs write it; the wild corpus's Lightning case (benchmarks/wild.py)."""

import lightning as L
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Regressor(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 1)
        )

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.mse_loss(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3)


def main():
    torch.manual_seed(0)
    x = torch.randn(150 * 64, 256)
    y = x[:, :8].sum(dim=1, keepdim=True)
    loader = DataLoader(TensorDataset(x, y), batch_size=64, shuffle=True)
    model = Regressor()
    trainer = L.Trainer(
        max_epochs=1,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(model, loader)


if __name__ == "__main__":
    main()
