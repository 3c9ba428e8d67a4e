"""``ray.train.constants`` (Ray Train 1.x): the keys ``train.report(**kw)`` fills in, and the
names of the files and folders a 1.x ``Trainer`` writes."""

TIMESTAMP = "_timestamp"
TIME_THIS_ITER_S = "_time_this_iter_s"
TRAINING_ITERATION = "_training_iteration"
RESULT_FILE_JSON = "results.json"
TRAIN_CHECKPOINT_SUBDIR = "checkpoints"
