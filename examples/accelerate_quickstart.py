"""Ray Train's Hugging Face Accelerate example (``accelerate_example.py``: BERT fine-tuned on
GLUE MRPC with an ``Accelerator`` inside the training function), ported to hpctrain: the
imports changed, and the data and model downloads.

This machine has no network, so a tiny BERT made from a ``BertConfig`` (2 layers, hidden
size 32), synthetic sentence pairs whose label follows from the tokens, and a plain
accuracy (instead of ``evaluate.load("glue", "mrpc")``) stand in. ``Accelerator()`` finds
its ranks, process group and device through the variables hpctrain sets in every worker
(``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``, and
``ACCELERATE_USE_CPU``/``ACCELERATE_TORCH_DEVICE``): nothing to configure, no
``accelerate launch``.

    python examples/accelerate_quickstart.py [--workers 2] [--epochs 3] [--storage DIR]
"""
import argparse
from tempfile import TemporaryDirectory

import torch
from accelerate import Accelerator
from torch.optim import AdamW
from torch.utils.data import DataLoader, TensorDataset
from transformers import (BertConfig, BertForSequenceClassification,
                          get_linear_schedule_with_warmup, set_seed)

import hpctrain                                   # was: import ray.train
from hpctrain import Checkpoint, ScalingConfig    # was: from ray.train import Checkpoint, ScalingConfig
from hpctrain.torch import TorchTrainer           # was: from ray.train.torch import TorchTrainer

SEQ_LEN, VOCAB = 16, 100


def mrpc_like(n, seed):
    """was: load_dataset("glue", "mrpc") tokenized by AutoTokenizer("bert-base-cased")."""
    g = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(1, VOCAB, (n, SEQ_LEN), generator=g)
    labels = (input_ids[:, 0] > input_ids[:, SEQ_LEN // 2]).long()   # "paraphrase or not"
    return TensorDataset(input_ids, torch.ones_like(input_ids), labels)


def collate(rows):
    input_ids, attention_mask, labels = (torch.stack(t) for t in zip(*rows))
    return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


def train_func(config):
    """Your training function that launches on each worker."""

    # Unpack training configs
    lr = config["lr"]
    seed = config["seed"]
    num_epochs = config["num_epochs"]
    train_batch_size = config["train_batch_size"]
    eval_batch_size = config["eval_batch_size"]
    train_ds_size = config["train_dataset_size"]

    set_seed(seed)

    # Initialize accelerator
    accelerator = Accelerator()

    # Prepare the data loaders (was: Ray Data shards of GLUE MRPC)
    train_dataloader = DataLoader(mrpc_like(train_ds_size, seed=0), shuffle=True,
                                  batch_size=train_batch_size, collate_fn=collate)
    eval_dataloader = DataLoader(mrpc_like(config["eval_dataset_size"], seed=1),
                                 batch_size=eval_batch_size, collate_fn=collate)

    # Instantiate the model (was: from_pretrained("bert-base-cased", return_dict=True))
    model = BertForSequenceClassification(BertConfig(
        vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=SEQ_LEN, num_labels=2))

    # Instantiate optimizer
    optimizer = AdamW(params=model.parameters(), lr=lr)

    # Instantiate scheduler
    steps_per_epoch = train_ds_size // (accelerator.num_processes * train_batch_size)
    lr_scheduler = get_linear_schedule_with_warmup(
        optimizer=optimizer,
        num_warmup_steps=2,
        num_training_steps=(steps_per_epoch * num_epochs),
    )

    # Prepare everything with accelerator
    model, optimizer, train_dataloader, eval_dataloader, lr_scheduler = accelerator.prepare(
        model, optimizer, train_dataloader, eval_dataloader, lr_scheduler)

    for epoch in range(num_epochs):
        # Training
        model.train()
        for batch in train_dataloader:
            outputs = model(**batch)
            loss = outputs.loss
            accelerator.backward(loss)
            optimizer.step()
            lr_scheduler.step()
            optimizer.zero_grad()

        # Evaluation
        model.eval()
        correct, total = 0, 0
        for batch in eval_dataloader:
            with torch.no_grad():
                outputs = model(**batch)
            predictions = outputs.logits.argmax(dim=-1)
            predictions, references = accelerator.gather_for_metrics(
                (predictions, batch["labels"]))
            correct += (predictions == references).sum().item()   # was: metric.add_batch(...)
            total += len(references)
        eval_metric = {"accuracy": correct / total, "epoch": epoch,
                       "num_processes": accelerator.num_processes}
        accelerator.print(f"epoch {epoch}:", eval_metric)

        # Report checkpoint and metrics to hpctrain
        with TemporaryDirectory() as tmpdir:
            if accelerator.is_main_process:
                unwrapped_model = accelerator.unwrap_model(model)
                accelerator.save(unwrapped_model, f"{tmpdir}/ckpt_{epoch}.bin")
                checkpoint = Checkpoint.from_directory(tmpdir)
            else:
                checkpoint = None
            hpctrain.report(metrics=eval_metric, checkpoint=checkpoint)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--storage", default=None, help="storage path (default ~/hpctrain_results)")
    ap.add_argument("--name", default=None)
    ap.add_argument("--gpu", action="store_true", help="one GPU per worker (Ray's example: use_gpu=True)")
    args = ap.parse_args()

    config = {
        "lr": 2e-3,
        "num_epochs": args.epochs,
        "seed": 42,
        "train_batch_size": 16,
        "eval_batch_size": 32,
        "train_dataset_size": 256,
        "eval_dataset_size": 128,
    }

    trainer = TorchTrainer(
        train_func,
        train_loop_config=config,
        scaling_config=ScalingConfig(num_workers=args.workers, use_gpu=args.gpu),
        run_config=hpctrain.RunConfig(storage_path=args.storage, name=args.name),
    )

    result = trainer.fit()
    print(f"accuracy {result.metrics['accuracy']:.3f} after epoch {result.metrics['epoch']} on "
          f"{result.metrics['num_processes']} processes; checkpoint {result.checkpoint.path}")
