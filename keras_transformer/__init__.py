"""keras_transformer: the Transformer of "Attention Is All You Need" as Keras 3 layers and models."""
from keras_transformer.config import (BOS_ID, EOS_ID, PAD_ID, PRESETS, UNK_ID, DecodeConfig, TrainConfig,
                                      TransformerConfig)
from keras_transformer.losses import LabelSmoothedCrossEntropy
from keras_transformer.metrics import MaskedTokenAccuracy, Perplexity
from keras_transformer.model import Transformer
from keras_transformer.schedule import TransformerSchedule, paper_optimizer

__version__ = "0.1.0"
