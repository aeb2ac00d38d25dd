"""Data: parallel corpora, the shared SentencePiece vocabulary, and the token-bucketed tf.data pipeline.

    corpus = get_corpus("multi30k")                   # or "wmt14", "numbers", a local spec
    config = DataConfig(dataset="multi30k", vocab_size=8_000, tokens_per_batch=4_096)
    tokenizer = load_or_train_tokenizer(run_dir, corpus.training_sentences(),
                                        config.tokenizer_settings(corpus.name))
    train = make_corpus_dataset(corpus, "train", tokenizer, config)
    # ((source_ids (B, S), target_input_ids (B, T)), target_output_ids (B, T)), int32, 0 = PAD
"""
from keras_transformer.data.corpora import SPLITS, Corpus, CorpusFormatError, LocalParallelCorpus
from keras_transformer.data.data_config import DataConfig
from keras_transformer.data.factory import get_corpus, parse_local_spec, require_shared_data, shared_data_root
from keras_transformer.data.numbers_corpus import NumbersCorpus
from keras_transformer.data.pipeline import (PipelineStatistics, bucket_batch_sizes, bucket_boundaries,
                                             count_over_length, make_corpus_dataset, make_dataset,
                                             make_distributed_dataset, pipeline_statistics)
from keras_transformer.data.tfds_corpus import TfdsTranslationCorpus, wmt14_corpus
from keras_transformer.data.tokenizer import (BOS_ID, EOS_ID, PAD_ID, UNK_ID, SubwordTokenizer,
                                              TokenizerSettings, load_or_train_tokenizer)

__all__ = ["BOS_ID", "EOS_ID", "PAD_ID", "UNK_ID", "SPLITS", "Corpus", "CorpusFormatError", "DataConfig",
           "LocalParallelCorpus", "NumbersCorpus", "PipelineStatistics", "SubwordTokenizer",
           "TfdsTranslationCorpus", "TokenizerSettings", "bucket_batch_sizes", "bucket_boundaries",
           "count_over_length", "get_corpus", "load_or_train_tokenizer", "make_corpus_dataset",
           "make_dataset", "make_distributed_dataset", "parse_local_spec", "pipeline_statistics",
           "require_shared_data", "shared_data_root", "wmt14_corpus"]
