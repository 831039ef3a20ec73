"""Fine-tune a transformer for review classification with a hand-written accelerate loop.

Main data: {train,validation}.jsonl with {"text": ..., "label": ...} per line.
Extra data: a SQLite file written by the annotation tool, table reviews(id, text, label).
"""
import argparse
import json
import logging
import math
import os
import sqlite3

import evaluate
import torch
from accelerate import Accelerator
from accelerate.logging import get_logger
from accelerate.utils import set_seed
from datasets import Dataset as HFDataset
from datasets import DatasetDict
from torch.optim.lr_scheduler import LambdaLR
from torch.utils.data import DataLoader, Dataset
from tqdm.auto import tqdm
from transformers import AutoModelForSequenceClassification, AutoTokenizer, DataCollatorWithPadding

logger = get_logger(__name__)


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--model_name_or_path", default="distilroberta-base")
    p.add_argument("--data_dir", required=True)
    p.add_argument("--extra_db", default=None)
    p.add_argument("--output_dir", default="out/reviews")
    p.add_argument("--max_length", type=int, default=256)
    p.add_argument("--per_device_train_batch_size", type=int, default=32)
    p.add_argument("--per_device_eval_batch_size", type=int, default=64)
    p.add_argument("--learning_rate", type=float, default=3e-5)
    p.add_argument("--weight_decay", type=float, default=0.01)
    p.add_argument("--num_train_epochs", type=int, default=3)
    p.add_argument("--gradient_accumulation_steps", type=int, default=1)
    p.add_argument("--warmup_steps", type=int, default=500)
    p.add_argument("--logging_steps", type=int, default=50)
    p.add_argument("--extra_every", type=int, default=4, help="take one extra-data batch every N steps")
    p.add_argument("--extra_weight", type=float, default=0.5)
    p.add_argument("--seed", type=int, default=42)
    return p.parse_args()


def read_jsonl(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


class SqliteReviews(Dataset):
    def __init__(self, db_path, tokenizer, label2id, max_length):
        self.db_path = db_path
        with sqlite3.connect(db_path) as conn:
            rows = conn.execute("SELECT id FROM reviews WHERE label IS NOT NULL ORDER BY id").fetchall()
        self.ids = [r[0] for r in rows]
        self.tokenizer = tokenizer
        self.label2id = label2id
        self.max_length = max_length

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        conn = sqlite3.connect(self.db_path)  # expect: TM105
        text, label = conn.execute("SELECT text, label FROM reviews WHERE id = ?", (self.ids[i],)).fetchone()
        conn.close()
        enc = self.tokenizer(text, truncation=True, max_length=self.max_length)
        enc["labels"] = self.label2id[label]
        return enc


class EvalLoader:
    """Builds the evaluation loader on first use and hands back the same one afterwards."""

    def __init__(self, dataset, collator):
        self.dataset = dataset
        self.collator = collator
        self._loader = None

    def get(self, batch_size):
        if self._loader is None:
            self._loader = DataLoader(  # expect: TM109
                self.dataset, batch_size=batch_size, collate_fn=self.collator, pin_memory=True
            )
        return self._loader


@torch.no_grad()
def score_examples(model, dataset, device):
    """Per-example loss of the current model, used to pick hard examples for the next round."""
    model.eval()
    losses = []
    for ex in dataset:
        inputs = {k: torch.tensor(v)[None].to(device) for k, v in ex.items()}  # expect: TM108
        losses.append(model(**inputs).loss)
    model.train()
    return torch.stack(losses)


def evaluate_model(model, loader, accelerator, metric):
    model.eval()
    total, n = 0.0, 0
    for batch in loader:
        with torch.no_grad():
            outputs = model(**batch)
        preds = outputs.logits.argmax(dim=-1)
        preds, refs = accelerator.gather_for_metrics((preds, batch["labels"]))
        metric.add_batch(predictions=preds, references=refs)
        total += accelerator.gather(outputs.loss.detach()).sum()
        n += 1
    model.train()
    result = metric.compute()
    result["eval_loss"] = (total / max(n, 1)).item()
    return result


def main():
    args = parse_args()
    accelerator = Accelerator(
        gradient_accumulation_steps=args.gradient_accumulation_steps,
        log_with="tensorboard",
        project_dir=args.output_dir,
    )
    logging.basicConfig(format="%(asctime)s - %(levelname)s - %(name)s - %(message)s", level=logging.INFO)
    set_seed(args.seed)

    raw = DatasetDict({
        split: HFDataset.from_list(read_jsonl(os.path.join(args.data_dir, f"{split}.jsonl")))
        for split in ("train", "validation")
    })
    label_names = sorted({ex["label"] for ex in raw["train"]}, key=lambda s: s.lower())
    label2id = {name: i for i, name in enumerate(label_names)}
    for split in list(raw):
        raw[split] = raw[split].filter(lambda ex: bool(ex["text"] and ex["text"].strip()))
        raw[split] = raw[split].map(lambda ex: {"labels": label2id[ex["label"]], "source": split})
        logger.info("%s: %d examples", split, len(raw[split]))

    tokenizer = AutoTokenizer.from_pretrained(args.model_name_or_path)
    model = AutoModelForSequenceClassification.from_pretrained(
        args.model_name_or_path,
        num_labels=len(label_names),
        id2label=dict(enumerate(label_names)),
        label2id=label2id,
    )
    with accelerator.main_process_first():
        tokenized = raw.map(
            lambda batch: tokenizer(batch["text"], truncation=True, max_length=args.max_length),
            batched=True,
            remove_columns=["text", "label", "source"],
        )
    # sort validation by length so that padded batches waste less compute
    lengths = [len(ids) for ids in tokenized["validation"]["input_ids"]]
    eval_ds = tokenized["validation"].select(sorted(range(len(lengths)), key=lambda i: lengths[i]))

    pad_to = 8 if accelerator.mixed_precision != "no" else None
    collator = DataCollatorWithPadding(tokenizer, pad_to_multiple_of=pad_to)
    train_dataloader = DataLoader(tokenized["train"], shuffle=True, collate_fn=collator,
                                  batch_size=args.per_device_train_batch_size)
    eval_loader = EvalLoader(eval_ds, collator)
    extra_loader = None
    if args.extra_db:
        extra_ds = SqliteReviews(args.extra_db, tokenizer, label2id, args.max_length)
        extra_loader = DataLoader(  # expect: TM110
            extra_ds, batch_size=args.per_device_train_batch_size, shuffle=True,
            collate_fn=collator, num_workers=0,
        )

    no_decay = ("bias", "LayerNorm.weight")
    head_names = ("classifier", "pre_classifier")
    groups = [
        {"params": [p for n, p in model.named_parameters() if not n.startswith(head_names)
                    and not any(nd in n for nd in no_decay)], "weight_decay": args.weight_decay,
         "lr": args.learning_rate, "warmup": args.warmup_steps},
        {"params": [p for n, p in model.named_parameters() if not n.startswith(head_names)
                    and any(nd in n for nd in no_decay)], "weight_decay": 0.0,
         "lr": args.learning_rate, "warmup": args.warmup_steps},
        {"params": [p for n, p in model.named_parameters() if n.startswith(head_names)], "weight_decay": 0.0,
         "lr": args.learning_rate * 10, "warmup": max(1, args.warmup_steps // 10)},
    ]
    optimizer = torch.optim.AdamW(groups, lr=args.learning_rate)

    steps_per_epoch = math.ceil(len(train_dataloader) / args.gradient_accumulation_steps)
    max_train_steps = args.num_train_epochs * steps_per_epoch

    def linear_decay(step):
        return max(0.0, 1.0 - step / max_train_steps)

    lr_lambdas = []
    for g in groups:
        lr_lambdas.append(lambda s: min(1.0, (s + 1) / g["warmup"]) * linear_decay(s))  # expect: TM101
    lr_scheduler = LambdaLR(optimizer, lr_lambda=lr_lambdas)

    model, optimizer, train_dataloader, lr_scheduler = accelerator.prepare(
        model, optimizer, train_dataloader, lr_scheduler
    )
    accelerator.init_trackers("reviews", config=vars(args))
    metric = evaluate.load("accuracy")

    progress_bar = tqdm(range(max_train_steps), disable=not accelerator.is_local_main_process)
    completed_steps = 0
    best_acc = 0.0
    for epoch in range(args.num_train_epochs):
        model.train()
        total_loss = torch.zeros((), device=accelerator.device)
        extra_iter = iter(extra_loader) if extra_loader is not None else None
        for step, batch in enumerate(train_dataloader):
            extra_batch = None
            if extra_iter is not None and step % args.extra_every == 0:
                extra_batch = next(extra_iter, None)
                if extra_batch is not None:
                    for k, v in extra_batch.items():
                        extra_batch[k] = v.to(accelerator.device)

            with accelerator.accumulate(model):
                outputs = model(**batch)
                loss = outputs.loss
                if extra_batch is not None:
                    loss = loss + args.extra_weight * model(**extra_batch).loss
                total_loss += loss.detach().float()
                accelerator.backward(loss)
                if accelerator.sync_gradients:
                    accelerator.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                lr_scheduler.step()
                optimizer.zero_grad()

            if accelerator.sync_gradients:
                progress_bar.update(1)
                completed_steps += 1
            progress_bar.set_postfix(loss=loss.item(), lr=lr_scheduler.get_last_lr()[0])  # expect: TM107
            logger.info("epoch %d step %d/%d", epoch, step, len(train_dataloader))  # expect: TM111

            if completed_steps % args.logging_steps == 0 and accelerator.sync_gradients:
                accelerator.log({"train_loss": total_loss.item() / (step + 1),
                                 "lr": lr_scheduler.get_last_lr()[0]}, step=completed_steps)

        loader = accelerator.prepare(eval_loader.get(args.per_device_eval_batch_size))
        result = evaluate_model(model, loader, accelerator, metric)
        logger.info("epoch %d: %s", epoch, json.dumps(result))
        accelerator.log({f"eval/{k}": v for k, v in result.items()}, step=completed_steps)

        if result["accuracy"] > best_acc:
            best_acc = result["accuracy"]
            accelerator.wait_for_everyone()
            unwrapped = accelerator.unwrap_model(model)
            unwrapped.save_pretrained(
                os.path.join(args.output_dir, "best"),
                is_main_process=accelerator.is_main_process,
                save_function=accelerator.save,
            )
            if accelerator.is_main_process:
                tokenizer.save_pretrained(os.path.join(args.output_dir, "best"))
        accelerator.save_state(os.path.join(args.output_dir, f"epoch_{epoch}"))

    if args.extra_db:
        hard = score_examples(accelerator.unwrap_model(model), tokenized["validation"], accelerator.device)
        top = hard.topk(min(100, len(hard))).indices.tolist()
        with open(os.path.join(args.output_dir, "hardest_validation.json"), "w") as f:
            json.dump(top, f)
    accelerator.end_training()


if __name__ == "__main__":
    main()
