"""A Hugging Face ``Trainer`` on a tiny GPT-2 built from a config (no download), on random token
ids; the wild corpus's HF case (benchmarks/wild.py)."""

import tempfile

import torch
from torch.utils.data import Dataset
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments


class RandomTokens(Dataset):
    def __init__(self, n, length, vocab):
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(vocab, (n, length), generator=g)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def main():
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=512, n_positions=128, n_embd=128, n_layer=2, n_head=4)
    model = GPT2LMHeadModel(config)
    with tempfile.TemporaryDirectory() as out:
        args = TrainingArguments(
            output_dir=out,
            max_steps=80,
            per_device_train_batch_size=16,
            learning_rate=3e-4,
            logging_steps=20,
            save_strategy="no",
            report_to=[],
            use_cpu=True,
            dataloader_num_workers=0,
            disable_tqdm=True,
        )
        trainer = Trainer(model=model, args=args, train_dataset=RandomTokens(2000, 64, 512))
        trainer.train()


if __name__ == "__main__":
    main()
