"""Training jobs: the run's configs, strategy, resumable data stream, checkpoints, averaging, evaluation
and TensorBoard monitoring, driven by `keras_transformer.training.run.train_and_evaluate`."""
