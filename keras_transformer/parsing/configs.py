"""The run configs of a parsing job: a preset's (config.PRESETS, TRAIN_PRESETS, RUN_PRESETS) with
the decoding of the paper's section 6.3 and a treebank corpus.

Section 6.3: beam 21, alpha 0.3, maximum output length = input length + 300. The `parsing_tiny`
preset (tests and the offline quick run) decodes with beam 4 to stay quick.
"""
import dataclasses

from keras_transformer.config import DecodeConfig
from keras_transformer.parsing.corpus import treebank_spec
from keras_transformer.training.run_config import RunConfigs, preset_configs

PARSING_PRESETS = ("parsing", "parsing_small", "parsing_tiny")
PAPER_DECODE = DecodeConfig(beam_size=21, alpha=0.3, extra_length=300)
# The longest (sentence, linearized tree) pair trained on, in SentencePiece tokens: a tree is about
# four tokens per word (GUM train: 3.9; 256 leaves out 73 of its 10,224 trees, 384 three).
DATA_MAX_LENGTH = {"parsing": 512, "parsing_small": 256, "parsing_tiny": 256}


def parsing_configs(preset: str, train, validation, test, linearization: str = "brackets",
                    loss: str = "all", parser: str = "seq2seq") -> RunConfigs:
    """The configs of `preset` for the treebank files (paths or lists of paths) of each split, the
    trees linearized as `linearization` (parsing.corpus.LINEARIZATIONS), the loss on `loss`
    (parsing.corpus.LOSSES), for the model `parser` (parsing.corpus.PARSERS)."""
    if preset not in PARSING_PRESETS:
        raise ValueError(f"unknown parsing preset {preset!r}; expected one of {PARSING_PRESETS}")
    configs = preset_configs(preset, treebank_spec(train, validation, test, linearization, loss, parser))
    decode = PAPER_DECODE if preset != "parsing_tiny" else dataclasses.replace(PAPER_DECODE, beam_size=4)
    data = dataclasses.replace(configs.data, max_length=DATA_MAX_LENGTH[preset])
    return dataclasses.replace(configs, decode=decode, data=data)
