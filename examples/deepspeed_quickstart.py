"""Ray Train's DeepSpeed example (``deepspeed_torch_trainer_no_raydata.py`` from the guide
"Get Started with DeepSpeed": BERT fine-tuned on GLUE MRPC with ZeRO-3, every worker saving
its own checkpoint shard), ported to hpctrain: the imports changed, and the data and model
downloads.

This machine has no network and no GPU, so a tiny BERT made from a ``BertConfig``, synthetic
sentence pairs whose label follows from the tokens, a plain accuracy (instead of
torchmetrics), fp32 (``"fp16": {"enabled": False}``: Ray's example is for GPUs) and torch's
own AdamW (``"torch_adam": True``: DeepSpeed's default FusedAdam is a compiled op) stand in.
``deepspeed.initialize`` finds its ranks through the variables hpctrain sets in every worker
and reuses hpctrain's process group; on CPU runs hpctrain sets ``DS_ACCELERATOR=cpu``.

Each epoch every rank writes its ZeRO shards with ``model.save_checkpoint(tmpdir)`` and
reports them: hpctrain commits the shards of all ranks as ONE checkpoint. A rerun (or a
restart after a failure, or a run given ``--resume-from CHECKPOINT_DIR``) resumes with
``model.load_checkpoint``.

    python examples/deepspeed_quickstart.py [--workers 2] [--epochs 3] [--zero-stage 3]
        [--storage DIR] [--name NAME] [--resume-from CHECKPOINT_DIR]
"""
import argparse
from tempfile import TemporaryDirectory

import deepspeed
import torch
from deepspeed.accelerator import get_accelerator
from torch.utils.data import DataLoader, TensorDataset
from transformers import BertConfig, BertForSequenceClassification, set_seed

import hpctrain                                   # was: import ray.train
from hpctrain import Checkpoint, ScalingConfig    # was: from ray.train import ScalingConfig, Checkpoint
from hpctrain.torch import TorchTrainer           # was: from ray.train.torch import TorchTrainer

SEQ_LEN, VOCAB = 16, 100


# Your DeepSpeed config (was: built in __main__; here at module level, so that a job file
# naming train_func gets it too)
DEEPSPEED_CONFIG = {
    "optimizer": {
        "type": "AdamW",
        "params": {
            "lr": 2e-3,
            "torch_adam": True,  # was: DeepSpeed's FusedAdam (a compiled op)
        },
    },
    "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 4}},
    "fp16": {"enabled": False},  # was: True (on GPUs)
    "bf16": {"enabled": False},  # Turn this on if using AMPERE GPUs.
    "zero_optimization": {
        "stage": 3,
        "offload_optimizer": {
            "device": "none",
        },
        "offload_param": {
            "device": "none",
        },
    },
    "gradient_accumulation_steps": 1,
    "gradient_clipping": True,
    "steps_per_print": 10,
    "train_micro_batch_size_per_gpu": 16,
    "wall_clock_breakdown": False,
}


def mrpc_like(n, seed):
    """was: load_dataset("glue", "mrpc") tokenized by AutoTokenizer("bert-base-cased")."""
    g = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(1, VOCAB, (n, SEQ_LEN), generator=g)
    labels = (input_ids[:, 0] > input_ids[:, SEQ_LEN // 2]).long()   # "paraphrase or not"
    return TensorDataset(input_ids, torch.ones_like(input_ids), labels)


def collate_fn(rows):
    input_ids, attention_mask, labels = (torch.stack(t) for t in zip(*rows))
    return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


def train_func(config):
    """Your training function that will be launched on each worker."""

    # Unpack training configs
    set_seed(config["seed"])
    num_epochs = config["num_epochs"]
    eval_batch_size = config["eval_batch_size"]
    deepspeed_config = config.get("deepspeed_config", DEEPSPEED_CONFIG)

    # Instantiate the Model (was: from_pretrained("bert-base-cased", return_dict=True))
    model = BertForSequenceClassification(BertConfig(
        vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=SEQ_LEN, num_labels=2))

    # Instantiate dataloaders.
    # The train_dataloader already created by `deepspeed.initialize`
    eval_dataloader = DataLoader(
        mrpc_like(config["eval_dataset_size"], seed=1),
        shuffle=False,
        collate_fn=collate_fn,
        batch_size=eval_batch_size,
        drop_last=True,
    )

    # Initialize DeepSpeed Engine
    model, optimizer, train_dataloader, lr_scheduler = deepspeed.initialize(
        model=model,
        model_parameters=model.parameters(),
        training_data=mrpc_like(config["train_dataset_size"], seed=0),
        collate_fn=collate_fn,
        config=deepspeed_config,
    )
    device = get_accelerator().device_name(model.local_rank)

    # Resume from the last checkpoint: each rank loads its own shards from it
    start_epoch = 0
    checkpoint = hpctrain.get_checkpoint()        # was: ray.train.get_checkpoint()
    if checkpoint:
        with checkpoint.as_directory() as ckpt_dir:
            _, client_state = model.load_checkpoint(ckpt_dir)
        start_epoch = client_state["epoch"] + 1
        if model.global_rank == 0:
            print(f"resumed from {checkpoint.path} at epoch {start_epoch}")

    for epoch in range(start_epoch, num_epochs):
        # Training
        model.train()
        for batch in train_dataloader:
            batch = {k: v.to(device) for k, v in batch.items()}
            outputs = model(**batch)
            loss = outputs.loss
            model.backward(loss)
            optimizer.step()
            lr_scheduler.step()
            optimizer.zero_grad()

        # Evaluation
        model.eval()
        correct = torch.zeros(2)
        for batch in eval_dataloader:
            batch = {k: v.to(device) for k, v in batch.items()}
            with torch.no_grad():
                outputs = model(**batch)
            predictions = outputs.logits.argmax(dim=-1)
            correct += torch.tensor([(predictions == batch["labels"]).sum().item(),
                                     len(predictions)])

        # was: torchmetrics aggregating across all workers
        torch.distributed.all_reduce(correct)
        eval_metric = {"accuracy": (correct[0] / correct[1]).item(), "epoch": epoch,
                       "world_size": model.world_size}

        if model.global_rank == 0:
            print(f"epoch {epoch}:", eval_metric)

        # Report checkpoint and metrics to hpctrain
        # ==============================================================
        with TemporaryDirectory() as tmpdir:
            # Each worker saves its own checkpoint shard
            model.save_checkpoint(tmpdir, client_state={"epoch": epoch})

            # Ensure all workers finished saving their checkpoint shard
            torch.distributed.barrier()

            # Report checkpoint shards from each worker in parallel
            hpctrain.report(
                metrics=eval_metric, checkpoint=Checkpoint.from_directory(tmpdir)
            )
        # ==============================================================


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--zero-stage", type=int, default=3)
    ap.add_argument("--storage", default=None, help="storage path (default ~/hpctrain_results)")
    ap.add_argument("--name", default=None)
    ap.add_argument("--resume-from", default=None,
                    help="a checkpoint directory of an earlier run to start from")
    args = ap.parse_args()

    deepspeed_config = dict(DEEPSPEED_CONFIG, zero_optimization=dict(
        DEEPSPEED_CONFIG["zero_optimization"], stage=args.zero_stage))

    training_config = {
        "seed": 42,
        "num_epochs": args.epochs,
        "eval_batch_size": 32,
        "train_dataset_size": 256,
        "eval_dataset_size": 128,
        "deepspeed_config": deepspeed_config,
    }

    trainer = TorchTrainer(
        train_func,
        train_loop_config=training_config,
        scaling_config=ScalingConfig(num_workers=args.workers, use_gpu=False),
        run_config=hpctrain.RunConfig(storage_path=args.storage, name=args.name),
        resume_from_checkpoint=(Checkpoint.from_directory(args.resume_from)
                                if args.resume_from else None),
    )

    result = trainer.fit()

    # Retrieve the best checkponints from results
    result.best_checkpoints
    print(f"accuracy {result.metrics['accuracy']:.3f} after epoch {result.metrics['epoch']} "
          f"on {result.metrics['world_size']} ranks; checkpoint {result.checkpoint.path}")
