"""Train the `tiny` preset offline on English -> German number words and translate a few numbers.

    python -m pipelines.quickstart [--workdir runs/quickstart] [--steps 750]

The README's first command: it needs no network (the corpus is made with num2words) and runs in a
few minutes on 2 CPU cores. It prints the validation token accuracy and greedy translations.
"""
import argparse
import os

import keras
import tensorflow as tf

import keras_transformer as kt
from keras_transformer.config import TrainConfig
from keras_transformer.data import DataConfig, NumbersCorpus, load_or_train_tokenizer, make_corpus_dataset
from keras_transformer.decoding import greedy_decode


def translate(model, tokenizer, sentences, extra_length=50):
    """Greedy translations of a list of strings."""
    tokens = tokenizer.tokenize(tf.constant(sentences))
    source = tf.concat([tokens, tf.fill([tokens.nrows(), 1], kt.EOS_ID)], axis=1).to_tensor()
    max_lengths = tf.reduce_sum(tf.cast(source != kt.PAD_ID, tf.int32), axis=1) + extra_length
    step_fn, cache = model.decoding_step_fn(source, beam_size=1, cache_length=int(tf.reduce_max(max_lengths)))
    result = greedy_decode(step_fn, cache, len(sentences), max_lengths, kt.BOS_ID, kt.EOS_ID)
    ids = tf.RaggedTensor.from_tensor(result["ids"], lengths=result["lengths"] - 1)  # drop EOS
    return [text.decode("utf-8") for text in tokenizer.detokenize(ids).numpy()]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", default="runs/quickstart", help="where the vocabulary is written")
    parser.add_argument("--steps", type=int, default=750, help="training steps")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    keras.utils.set_random_seed(args.seed)
    os.makedirs(args.workdir, exist_ok=True)

    corpus = NumbersCorpus(seed=args.seed)
    data_config = DataConfig(dataset="numbers", vocab_size=1000, tokens_per_batch=4096, seed=args.seed)
    tokenizer = load_or_train_tokenizer(args.workdir, corpus.training_sentences(),
                                        data_config.tokenizer_settings(corpus.name))
    train = make_corpus_dataset(corpus, "train", tokenizer, data_config).repeat()
    validation = make_corpus_dataset(corpus, "validation", tokenizer, data_config, training=False)

    model = kt.Transformer.from_preset("tiny", vocab_size=tokenizer.vocab_size)
    model.compile(optimizer=kt.paper_optimizer(model.config.d_model, TrainConfig(warmup_steps=400)))
    epochs = 5
    model.fit(train, steps_per_epoch=args.steps // epochs, epochs=epochs, validation_data=validation,
              verbose=2)
    metrics = model.evaluate(validation, verbose=0, return_dict=True)
    print(f"validation: token accuracy {metrics['token_accuracy']:.3f}, perplexity {metrics['perplexity']:.2f}")
    sources = [source for source, _ in list(corpus.pairs("test"))[:5]]
    references = [target for _, target in list(corpus.pairs("test"))[:5]]
    for source, hypothesis, reference in zip(sources, translate(model, tokenizer, sources), references):
        print(f"{source}\n  -> {hypothesis}\n  (reference: {reference})")


if __name__ == "__main__":
    main()
