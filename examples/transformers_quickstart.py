"""Ray Train's "Get Started with Hugging Face Transformers" guide, ported to hpctrain: the
imports changed, and the data and model downloads.

Ray's guide fine-tunes ``bert-base-cased`` on 100 Yelp reviews tokenized by the model's
tokenizer, and scores accuracy with ``evaluate``. This machine has no network, so a tiny
BERT made from a ``BertConfig`` (2 layers, hidden size 32), synthetic token ids whose
label follows from the tokens, and a NumPy accuracy stand in. The rest is the guide's
code: ``RayTrainReportCallback`` and ``prepare_trainer`` under their Ray names. Like the
guide's fault-tolerance section, ``train_func`` resumes from the run's latest checkpoint
(optimizer, scheduler and RNG state included) when there is one.

    python examples/transformers_quickstart.py [--workers 2] [--epochs 3] [--storage DIR]
"""
import argparse
import os

import numpy as np
import torch
from transformers import (BertConfig, BertForSequenceClassification, Trainer,
                          TrainingArguments)

import hpctrain                                      # was: import ray.train
import hpctrain.huggingface.transformers             # was: import ray.train.huggingface.transformers
from hpctrain import ScalingConfig                   # was: from ray.train import ScalingConfig
from hpctrain.torch import TorchTrainer              # was: from ray.train.torch import TorchTrainer

SEQ_LEN, VOCAB, LABELS = 16, 100, 5


class ReviewsLike(torch.utils.data.Dataset):
    """was: load_dataset("yelp_review_full") tokenized with AutoTokenizer("bert-base-cased")."""

    def __init__(self, n, seed):
        g = torch.Generator().manual_seed(seed)
        self.input_ids = torch.randint(1, VOCAB, (n, SEQ_LEN), generator=g)
        self.labels = (self.input_ids[:, 0] * LABELS) // VOCAB   # the first token decides

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return {"input_ids": self.input_ids[i], "attention_mask": torch.ones(SEQ_LEN, dtype=torch.long),
                "labels": self.labels[i]}


def tiny_bert():
    """was: AutoModelForSequenceClassification.from_pretrained("bert-base-cased", num_labels=5)"""
    torch.manual_seed(0)
    return BertForSequenceClassification(BertConfig(
        vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=SEQ_LEN, num_labels=LABELS))


# [1] Encapsulate data preprocessing, training, and evaluation
# logic in a training function
# ============================================================
def train_func(config):
    # Datasets
    small_train_dataset = ReviewsLike(config.get("samples", 100), seed=0)
    small_eval_dataset = ReviewsLike(config.get("samples", 100), seed=1)

    # Model
    model = tiny_bert()

    # Evaluation Metrics
    def compute_metrics(eval_pred):
        logits, labels = eval_pred
        predictions = np.argmax(logits, axis=-1)
        return {"accuracy": float((predictions == labels).mean())}   # was: evaluate.load("accuracy")

    # Hugging Face Trainer
    training_args = TrainingArguments(
        output_dir="test_trainer", eval_strategy="epoch", save_strategy="epoch",
        report_to="none", num_train_epochs=config["epochs"], learning_rate=1e-3,
        per_device_train_batch_size=8, logging_strategy="epoch", seed=0,
    )

    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=small_train_dataset,
        eval_dataset=small_eval_dataset,
        compute_metrics=compute_metrics,
    )

    # [2] Report Metrics and Checkpoints to hpctrain
    # ==============================================
    callback = hpctrain.huggingface.transformers.RayTrainReportCallback()
    trainer.add_callback(callback)

    # [3] Prepare Transformers Trainer
    # ================================
    trainer = hpctrain.huggingface.transformers.prepare_trainer(trainer)

    # Start Training (resuming after a preemption: Ray's fault-tolerance guide)
    checkpoint = hpctrain.get_checkpoint()
    if checkpoint:
        with checkpoint.as_directory() as checkpoint_dir:
            checkpoint_path = os.path.join(
                checkpoint_dir, hpctrain.huggingface.transformers.RayTrainReportCallback.CHECKPOINT_NAME)
            trainer.train(resume_from_checkpoint=checkpoint_path)
    else:
        trainer.train()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--storage", default=None, help="storage path (default ~/hpctrain_results)")
    ap.add_argument("--name", default=None)
    ap.add_argument("--gpu", action="store_true", help="one GPU per worker (Ray's example: use_gpu=True)")
    args = ap.parse_args()

    # [4] Define an hpctrain TorchTrainer to launch `train_func` on all workers
    # =========================================================================
    ray_trainer = TorchTrainer(
        train_func,
        train_loop_config={"epochs": args.epochs},
        scaling_config=ScalingConfig(num_workers=args.workers, use_gpu=args.gpu),
        # [4a] On a cluster, the run's storage is a shared filesystem path.
        run_config=hpctrain.RunConfig(storage_path=args.storage, name=args.name),
    )
    result: hpctrain.Result = ray_trainer.fit()

    # [5] Load the trained model.
    with result.checkpoint.as_directory() as checkpoint_dir:
        checkpoint_path = os.path.join(
            checkpoint_dir,
            hpctrain.huggingface.transformers.RayTrainReportCallback.CHECKPOINT_NAME,
        )
        model = BertForSequenceClassification.from_pretrained(checkpoint_path)
    print(f"eval accuracy {result.metrics['eval_accuracy']:.3f} after epoch "
          f"{result.metrics['epoch']:g}; reloaded the model from "
          f"{os.path.basename(result.checkpoint.path)}/checkpoint")
