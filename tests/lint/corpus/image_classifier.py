import argparse
import csv
import json
import os
import shutil
import time
from enum import Enum

import torch
import torch.nn as nn
import torch.optim
import torchvision.datasets as datasets
import torchvision.models as models
import torchvision.transforms as transforms
from PIL import Image
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import DataLoader, Dataset

model_names = sorted(
    name for name in models.__dict__
    if name.islower() and not name.startswith("__") and callable(models.__dict__[name])
)

parser = argparse.ArgumentParser(description="Image classification training")
parser.add_argument("data", metavar="DIR", help="path to dataset (with train/ and val/)")
parser.add_argument("-a", "--arch", default="resnet18", choices=model_names)
parser.add_argument("-j", "--workers", default=8, type=int)
parser.add_argument("--epochs", default=90, type=int)
parser.add_argument("--start-epoch", default=0, type=int)
parser.add_argument("-b", "--batch-size", default=256, type=int)
parser.add_argument("--lr", "--learning-rate", default=0.1, type=float, dest="lr")
parser.add_argument("--momentum", default=0.9, type=float)
parser.add_argument("--wd", "--weight-decay", default=1e-4, type=float, dest="weight_decay")
parser.add_argument("-p", "--print-freq", default=10, type=int)
parser.add_argument("--resume", default="", type=str)
parser.add_argument("--pretrained", action="store_true")
parser.add_argument("--extra-csv", default="", help="csv of (path,label) rows used to fine-tune the head")
parser.add_argument("--class-index", default="class_index.json")

best_acc1 = 0.0

NORMALIZE = transforms.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])


class CsvImageDataset(Dataset):
    """Rows of `relative/path.jpg,label_name`; images live under `root`."""

    def __init__(self, csv_path, root, class_index_path, transform=None, device="cpu"):
        with open(csv_path, newline="") as f:
            rows = [r for r in csv.reader(f) if r and not r[0].startswith("#")]
        self.paths = [os.path.join(root, r[0]) for r in rows]
        self.labels = [r[1] for r in rows]
        self.class_index_path = class_index_path
        self.transform = transform
        self.device = device

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, idx):
        image = Image.open(self.paths[idx]).convert("RGB")
        with open(self.class_index_path) as f:  # expect: TM105
            class_to_idx = json.load(f)
        if self.transform is not None:
            image = self.transform(image)
        image = image.to(self.device)  # expect: TM108
        return image, class_to_idx[self.labels[idx]]


class Summary(Enum):
    NONE = 0
    AVERAGE = 1


class AverageMeter:
    def __init__(self, name, fmt=":f", summary_type=Summary.AVERAGE):
        self.name = name
        self.fmt = fmt
        self.summary_type = summary_type
        self.reset()

    def reset(self):
        self.val = 0
        self.avg = 0
        self.sum = 0
        self.count = 0

    def update(self, val, n=1):
        self.val = val
        self.sum += val * n
        self.count += n
        self.avg = self.sum / self.count

    def __str__(self):
        fmtstr = "{name} {val" + self.fmt + "} ({avg" + self.fmt + "})"
        return fmtstr.format(**self.__dict__)


class ProgressMeter:
    def __init__(self, num_batches, meters, prefix=""):
        width = len(str(num_batches))
        self.batch_fmtstr = "[{:" + str(width) + "d}/" + str(num_batches) + "]"
        self.meters = meters
        self.prefix = prefix

    def display(self, batch):
        entries = [self.prefix + self.batch_fmtstr.format(batch)]
        entries += [str(meter) for meter in self.meters]
        print("\t".join(entries))


def accuracy(output, target, topk=(1,)):
    with torch.no_grad():
        maxk = max(topk)
        batch_size = target.size(0)
        _, pred = output.topk(maxk, 1, True, True)
        pred = pred.t()
        correct = pred.eq(target.view(1, -1).expand_as(pred))
        res = []
        for k in topk:
            correct_k = correct[:k].reshape(-1).float().sum(0, keepdim=True)
            res.append(correct_k.mul_(100.0 / batch_size))
        return res


_loaders = {}


def get_loader(split, data_dir, batch_size, workers):
    if split in _loaders:
        return _loaders[split]
    tf = transforms.Compose([
        transforms.RandomResizedCrop(224) if split == "train" else transforms.Resize(256),
        transforms.RandomHorizontalFlip() if split == "train" else transforms.CenterCrop(224),
        transforms.ToTensor(),
        NORMALIZE,
    ])
    ds = datasets.ImageFolder(os.path.join(data_dir, split), tf)
    _loaders[split] = DataLoader(  # expect: TM109
        ds, batch_size=batch_size, shuffle=(split == "train"), num_workers=workers,
        pin_memory=True, persistent_workers=True,
    )
    return _loaders[split]


def train(train_loader, model, criterion, optimizer, epoch, device, args):
    batch_time = AverageMeter("Time", ":6.3f")
    data_time = AverageMeter("Data", ":6.3f")
    losses = AverageMeter("Loss", ":.4e")
    top1 = AverageMeter("Acc@1", ":6.2f")
    top5 = AverageMeter("Acc@5", ":6.2f")
    progress = ProgressMeter(len(train_loader), [batch_time, data_time, losses, top1, top5],
                             prefix=f"Epoch: [{epoch}]")
    model.train()
    end = time.time()
    for i, (images, target) in enumerate(train_loader):
        data_time.update(time.time() - end)
        images = images.to(device, non_blocking=True)
        target = target.to(device, non_blocking=True)

        output = model(images)
        loss = criterion(output, target)

        acc1, acc5 = accuracy(output, target, topk=(1, 5))
        losses.update(loss.item(), images.size(0))  # expect: TM107
        top1.update(acc1[0], images.size(0))
        top5.update(acc5[0], images.size(0))

        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

        batch_time.update(time.time() - end)
        end = time.time()
        if i % args.print_freq == 0:
            progress.display(i + 1)


def validate(val_loader, model, criterion, device, args):
    losses = AverageMeter("Loss", ":.4e")
    top1 = AverageMeter("Acc@1", ":6.2f")
    top5 = AverageMeter("Acc@5", ":6.2f")
    progress = ProgressMeter(len(val_loader), [losses, top1, top5], prefix="Test: ")
    model.eval()
    with torch.no_grad():
        for i, (images, target) in enumerate(val_loader):
            images = images.to(device, non_blocking=True)
            target = target.to(device, non_blocking=True)
            output = model(images)
            loss = criterion(output, target)
            acc1, acc5 = accuracy(output, target, topk=(1, 5))
            losses.update(loss.detach(), images.size(0))
            top1.update(acc1[0], images.size(0))
            top5.update(acc5[0], images.size(0))
            if i % args.print_freq == 0:
                progress.display(i + 1)
    print(f" * Acc@1 {top1.avg.item():.3f} Acc@5 {top5.avg.item():.3f}")
    return top1.avg.item()


def finetune_head(model, args, device, epochs=3):
    """Quick pass over the extra labelled images, training only the classifier."""
    tf = transforms.Compose([
        transforms.Resize(256), transforms.CenterCrop(224), transforms.ToTensor(), NORMALIZE,
    ])
    ds = CsvImageDataset(args.extra_csv, os.path.dirname(args.extra_csv), args.class_index, tf, device=device)
    loader = DataLoader(ds, batch_size=64, shuffle=True, num_workers=0)  # expect: TM110
    head = model.fc
    opt = torch.optim.SGD(head.parameters(), lr=0.01, momentum=0.9)
    criterion = nn.CrossEntropyLoss()
    for p in model.parameters():
        p.requires_grad_(False)
    for p in head.parameters():
        p.requires_grad_(True)
    for epoch in range(epochs):
        for step, (images, target) in enumerate(loader):
            target = target.to(device)
            loss = criterion(model(images), target)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            print(f"finetune epoch {epoch} step {step}/{len(loader)}")  # expect: TM111
        print(f"finetune epoch {epoch} done")
    for p in model.parameters():
        p.requires_grad_(True)


def save_checkpoint(state, is_best, filename="checkpoint.pth.tar"):
    torch.save(state, filename)
    if is_best:
        shutil.copyfile(filename, "model_best.pth.tar")


def main():
    global best_acc1
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

    print(f"=> creating model '{args.arch}' (pretrained={args.pretrained})")
    model = models.__dict__[args.arch](weights="DEFAULT" if args.pretrained else None).to(device)
    criterion = nn.CrossEntropyLoss().to(device)
    optimizer = torch.optim.SGD(model.parameters(), args.lr, momentum=args.momentum,
                                weight_decay=args.weight_decay)
    scheduler = StepLR(optimizer, step_size=30, gamma=0.1)

    if args.resume and os.path.isfile(args.resume):
        checkpoint = torch.load(args.resume, map_location=device)
        args.start_epoch = checkpoint["epoch"]
        best_acc1 = checkpoint["best_acc1"]
        model.load_state_dict(checkpoint["state_dict"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        scheduler.load_state_dict(checkpoint["scheduler"])
        print(f"=> loaded checkpoint '{args.resume}' (epoch {checkpoint['epoch']})")

    train_loader = get_loader("train", args.data, args.batch_size, args.workers)
    # evaluation needs no activations for backward, so it can afford twice the batch
    val_loader = get_loader("val", args.data, 2 * args.batch_size, args.workers)

    if args.extra_csv:
        finetune_head(model, args, device)

    for epoch in range(args.start_epoch, args.epochs):
        train(train_loader, model, criterion, optimizer, epoch, device, args)
        acc1 = validate(val_loader, model, criterion, device, args)
        scheduler.step()

        is_best = acc1 > best_acc1
        best_acc1 = max(acc1, best_acc1)
        save_checkpoint({
            "epoch": epoch + 1,
            "arch": args.arch,
            "state_dict": model.state_dict(),
            "best_acc1": best_acc1,
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(),
        }, is_best)


if __name__ == "__main__":
    main()
