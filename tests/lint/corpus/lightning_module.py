"""Fine-tune a ResNet on an ImageFolder dataset with Lightning, then dump pooled features per stage."""
import argparse
import math
import os

import lightning as L
import torch
import torch.nn as nn
import torch.nn.functional as F
import torchmetrics
from lightning.pytorch.callbacks import EarlyStopping, LearningRateMonitor, ModelCheckpoint
from lightning.pytorch.loggers import TensorBoardLogger
from sklearn.metrics import f1_score
from torch.utils.data import DataLoader, random_split
from torchvision import datasets, models, transforms

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


class LitClassifier(L.LightningModule):
    def __init__(self, num_classes, lr=3e-4, weight_decay=0.05, warmup_epochs=2, max_epochs=30,
                 feature_layers=("layer2", "layer3", "layer4"), log_batch_f1=False):
        super().__init__()
        self.save_hyperparameters()
        self.backbone = models.resnet50(weights="IMAGENET1K_V2")
        self.backbone.fc = nn.Linear(self.backbone.fc.in_features, num_classes)
        self.train_acc = torchmetrics.Accuracy(task="multiclass", num_classes=num_classes)
        self.val_acc = torchmetrics.Accuracy(task="multiclass", num_classes=num_classes)
        self.val_f1 = torchmetrics.F1Score(task="multiclass", num_classes=num_classes, average="macro")
        self.features = {}
        self.act_stats = {}
        self._hooks = []
        self.val_probs = []

    def forward(self, x):
        return self.backbone(x)

    # -- hooks -------------------------------------------------------------

    def track_activation_stats(self):
        """Keep the mean |activation| of every stage so validation can log it."""
        stats = self.act_stats
        for stage in ("layer1", "layer2", "layer3", "layer4"):
            mod = getattr(self.backbone, stage)
            mod.register_forward_hook(lambda m, i, o: stats.update({stage: o.abs().mean()}))  # expect: TM101

    def _keep_output(self, name):
        def hook(module, inputs, output):
            self.features[name] = output.detach()
        return hook

    def attach_feature_hooks(self):
        modules = dict(self.backbone.named_modules())
        for name in self.hparams.feature_layers:
            self._hooks.append(modules[name].register_forward_hook(self._keep_output(name)))

    def remove_feature_hooks(self):
        for h in self._hooks:
            h.remove()
        self._hooks.clear()
        self.features.clear()

    # -- steps -------------------------------------------------------------

    def training_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        loss = F.cross_entropy(logits, y, label_smoothing=0.1)
        self.train_acc(logits, y)
        self.log("train/loss", loss.item(), prog_bar=True)  # expect: TM107
        self.log("train/acc", self.train_acc, on_step=False, on_epoch=True)
        if self.hparams.log_batch_f1:
            y_np = y.cpu().numpy()  # expect: TM107
            pred_np = logits.argmax(dim=1).cpu().numpy()  # expect: TM107
            self.log("train/f1_batch", f1_score(y_np, pred_np, average="macro", zero_division=0))
        if batch_idx % 200 == 0 and self.logger is not None:
            hist = logits.detach().float().cpu()
            self.logger.experiment.add_histogram("train/logits", hist, self.global_step)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        loss = F.cross_entropy(logits, y)
        self.val_acc(logits, y)
        self.val_f1(logits, y)
        self.log("val/loss", loss, prog_bar=True, sync_dist=True)
        self.log("val/acc", self.val_acc, prog_bar=True)
        self.log("val/f1", self.val_f1)
        for stage, value in self.act_stats.items():
            self.log(f"act/{stage}", value)
        self.val_probs.append(logits.softmax(dim=-1).detach())

    def on_validation_epoch_end(self):
        if not self.val_probs:
            return
        probs = torch.cat(self.val_probs)
        self.log("val/mean_confidence", probs.max(dim=1).values.mean())
        self.val_probs.clear()

    def test_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.log("test/acc", (logits.argmax(dim=1) == y).float().mean())

    def predict_step(self, batch, batch_idx):
        x, _ = batch
        return self(x).softmax(dim=-1)

    def configure_optimizers(self):
        decay, no_decay = [], []
        for name, p in self.named_parameters():
            if not p.requires_grad:
                continue
            (no_decay if p.ndim < 2 or name.endswith(".bias") else decay).append(p)
        opt = torch.optim.AdamW(
            [{"params": decay, "weight_decay": self.hparams.weight_decay},
             {"params": no_decay, "weight_decay": 0.0}],
            lr=self.hparams.lr,
        )
        warm, total = self.hparams.warmup_epochs, self.hparams.max_epochs

        def lr_factor(epoch):
            if epoch < warm:
                return (epoch + 1) / warm
            return 0.5 * (1 + math.cos(math.pi * (epoch - warm) / (total - warm)))

        sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_factor)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "epoch"}}


class ImageDataModule(L.LightningDataModule):
    def __init__(self, data_dir, batch_size=64, num_workers=8, val_fraction=0.1):
        super().__init__()
        self.save_hyperparameters()
        self.train_tf = transforms.Compose([
            transforms.RandomResizedCrop(224, scale=(0.3, 1.0)),
            transforms.RandomHorizontalFlip(),
            transforms.ToTensor(),
            transforms.Normalize(MEAN, STD),
        ])
        self.eval_tf = transforms.Compose([
            transforms.Resize(256),
            transforms.CenterCrop(224),
            transforms.ToTensor(),
            transforms.Normalize(MEAN, STD),
        ])
        self._loaders = {}

    def setup(self, stage=None):
        full = datasets.ImageFolder(os.path.join(self.hparams.data_dir, "train"), transform=self.train_tf)
        n_val = int(len(full) * self.hparams.val_fraction)
        self.train_ds, self.val_ds = random_split(
            full, [len(full) - n_val, n_val], generator=torch.Generator().manual_seed(42)
        )
        test_dir = os.path.join(self.hparams.data_dir, "test")
        self.test_ds = datasets.ImageFolder(test_dir, transform=self.eval_tf)
        self.num_classes = len(full.classes)

    def _cached_loader(self, split, batch_size):
        key = (split, batch_size)
        if key not in self._loaders:
            ds = {"train": self.train_ds, "test": self.test_ds}[split]
            self._loaders[key] = DataLoader(
                ds, batch_size=batch_size, shuffle=(split == "train"), num_workers=self.hparams.num_workers,
                pin_memory=True, persistent_workers=True, drop_last=(split == "train"),
            )
        return self._loaders[key]

    def train_dataloader(self):
        return self._cached_loader("train", self.hparams.batch_size)

    def val_dataloader(self):
        return DataLoader(self.val_ds, batch_size=2 * self.hparams.batch_size,  # expect: TM110
                          num_workers=self.hparams.num_workers, pin_memory=True)

    def test_dataloader(self):
        return self._cached_loader("test", 2 * self.hparams.batch_size)

    def predict_dataloader(self):
        # used once, for the feature dump at the end
        return DataLoader(self.test_ds, batch_size=256, num_workers=self.hparams.num_workers, pin_memory=True)


@torch.no_grad()
def extract_features(model, loader, device):
    model.eval().to(device)
    model.attach_feature_hooks()
    feats = {name: [] for name in model.hparams.feature_layers}
    for x, _ in loader:
        model(x.to(device, non_blocking=True))
        for name, f in model.features.items():
            feats[name].append(F.adaptive_avg_pool2d(f, 1).flatten(1).cpu())
    model.remove_feature_hooks()
    return {name: torch.cat(chunks) for name, chunks in feats.items()}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("data_dir")
    p.add_argument("--out", default="lightning_runs")
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--lr", type=float, default=3e-4)
    args = p.parse_args()
    L.seed_everything(42, workers=True)

    dm = ImageDataModule(args.data_dir, batch_size=args.batch_size, num_workers=args.workers)
    dm.setup("fit")
    model = LitClassifier(dm.num_classes, lr=args.lr, max_epochs=args.epochs)
    model.track_activation_stats()

    best_acc = ModelCheckpoint(monitor="val/acc", mode="max", save_top_k=2, auto_insert_metric_name=False,
                               filename="epoch{epoch:02d}-acc{val/acc:.3f}")
    best_f1 = ModelCheckpoint(monitor="val/f1", save_top_k=1, filename="best-f1")  # expect: TM102
    last = ModelCheckpoint(monitor="val/loss", save_last=True, filename="min-loss")
    early = EarlyStopping(monitor="val/acc", patience=8)  # expect: TM102

    trainer = L.Trainer(
        max_epochs=args.epochs,
        accelerator="auto",
        devices="auto",
        precision="16-mixed",
        callbacks=[best_acc, best_f1, last, early, LearningRateMonitor(logging_interval="epoch")],
        logger=TensorBoardLogger(args.out, name="resnet50"),
        log_every_n_steps=50,
        gradient_clip_val=1.0,
    )
    trainer.fit(model, datamodule=dm)
    trainer.test(ckpt_path="best", datamodule=dm)

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    best = LitClassifier.load_from_checkpoint(best_acc.best_model_path)
    feats = extract_features(best, dm.predict_dataloader(), device)
    torch.save(feats, os.path.join(args.out, "features.pt"))
    print({k: tuple(v.shape) for k, v in feats.items()})


if __name__ == "__main__":
    main()
