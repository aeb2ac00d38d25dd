"""The parsing task's pieces: the treebank corpus, answers checked (and repaired) against their
sentences, and the scores of a set of answers."""
import pytest

from keras_transformer.parsing.corpus import (TreebankCorpus, corpus_from_spec, gold_tree, parse_spec,
                                              parse_spec_options, treebank_spec)
from keras_transformer.parsing.treebank import TreebankFormatError
from keras_transformer.data import DataConfig
from keras_transformer.parsing.task import answer_tree, parse_scores, parsing_corpus, sequence_of_tree_text

TREES = ["(ROOT (S (NP-SBJ (PRP I)) (VP (VBD saw) (NP (DT a) (NN dog))) (. .)))",
         "( (S (NP-SBJ (-NONE- *)) (VP (VB Go) (ADVP (RB away))) (. !)))"]


@pytest.fixture
def treebank(tmp_path):
    (tmp_path / "train.mrg").write_text("\n".join(TREES) + "\n")
    (tmp_path / "dev.mrg").write_text(TREES[1] + "\n")
    return tmp_path


def test_treebank_corpus_pairs_symbols_and_spec(treebank):
    spec = treebank_spec(treebank / "train.mrg", [treebank / "dev.mrg"], treebank / "dev.mrg")
    corpus = corpus_from_spec(spec)
    assert list(corpus.pairs("train")) == [("I saw a dog .", "(S (NP PRP I ) (VP VBD saw (NP DT a NN dog ) ) . . )"),
                                           ("Go away !", "(S (VP VB Go (ADVP RB away ) ) . ! )")]
    assert corpus.num_pairs("validation") == corpus.num_pairs("test") == 1
    assert corpus.user_defined_symbols() == tuple("\u2581" + token for token in sorted(
        ["(S", "(NP", "(VP", "(ADVP", ")", "PRP", "VBD", "DT", "NN", "VB", "RB", "."]))
    assert [pair for pair in corpus.dataset("validation").as_numpy_iterator()] == [
        (b"Go away !", b"(S (VP VB Go (ADVP RB away ) ) . ! )")]
    assert gold_tree(*next(corpus.pairs("validation"))).to_string() == "(S (VP (VB Go) (ADVP (RB away))) (. !))"
    with pytest.raises(ValueError, match="train"):
        TreebankCorpus({"validation": treebank / "dev.mrg"})


def test_a_spec_names_its_files_and_linearization_without_reading_them(tmp_path):
    spec = treebank_spec(tmp_path / "a.mrg", [tmp_path / "b.mrg", tmp_path / "c.mrg"], tmp_path / "d.mrg", "depth")
    files, linearization = parse_spec(spec)  # none of the files exists
    assert linearization == "depth" and files["validation"] == [str(tmp_path / "b.mrg"), str(tmp_path / "c.mrg")]
    assert parse_spec(treebank_spec(tmp_path / "a", tmp_path / "b", tmp_path / "c"))[1] == "brackets"
    with pytest.raises(ValueError, match="not a treebank spec"):
        parse_spec("multi30k")


def test_a_spec_keeps_the_loss_on_labels_and_an_unknown_loss_is_named(tmp_path):
    spec = treebank_spec(tmp_path / "a", tmp_path / "b", tmp_path / "c", "depth_word_first", "labels")
    assert parse_spec_options(spec)[1] == {"linearization": "depth_word_first", "loss": "labels", "parser": "seq2seq"}
    assert parse_spec_options(treebank_spec(tmp_path / "a", tmp_path / "b", tmp_path / "c"))[1]["loss"] == "all"
    with pytest.raises(ValueError, match=r"unknown parsing loss 'words'; expected one of \('all', 'labels'\)"):
        treebank_spec(tmp_path / "a", tmp_path / "b", tmp_path / "c", "depth", "words")


def test_a_spec_keeps_the_span_parser_which_reads_the_depth_linearization(tmp_path):
    spec = treebank_spec(tmp_path / "a", tmp_path / "b", tmp_path / "c", "depth", parser="span")
    assert spec.endswith(";linearization=depth;parser=span")
    assert parse_spec_options(spec)[1] == {"linearization": "depth", "loss": "all", "parser": "span"}
    with pytest.raises(ValueError, match="the span parser reads its gold trees from the depth linearization, "
                                         "not 'brackets'"):
        treebank_spec(tmp_path / "a", tmp_path / "b", tmp_path / "c", parser="span")
    with pytest.raises(ValueError, match=r"unknown parser 'chart'; expected one of \('seq2seq', 'span'\)"):
        treebank_spec(tmp_path / "a", tmp_path / "b", tmp_path / "c", "depth", parser="chart")


@pytest.mark.parametrize("linearization", ["brackets", "depth_word_first"])
def test_the_loss_on_labels_scores_the_tree_tokens_and_eos_only(tmp_path, linearization):
    """Same batches as with the loss on every piece, but in the decoder's targets every piece that
    is not a tree token or EOS (the words, which decoding copies) is PAD, which the loss skips."""
    import numpy as np
    import sentencepiece

    from keras_transformer.config import EOS_ID, PAD_ID
    from keras_transformer.data import DataConfig, SubwordTokenizer, make_corpus_dataset
    from keras_transformer.data.tokenizer import TokenizerSettings, train_sentencepiece
    from keras_transformer.parsing.toy_treebank import write_toy_treebank
    from keras_transformer.training.data_stream import training_stream

    paths = write_toy_treebank(tmp_path, sizes={"train": 60})
    corpora = {loss: TreebankCorpus({"train": paths["train"]}, linearization=linearization, loss=loss)
               for loss in ("all", "labels")}
    assert corpora["all"].scored_target_symbols() is None
    symbols = corpora["labels"].scored_target_symbols()
    assert symbols == corpora["all"].user_defined_symbols() and len(symbols) > 5
    proto = train_sentencepiece(corpora["all"].training_sentences(), TokenizerSettings(
        vocab_size=500, user_defined_symbols=symbols))
    tokenizer = SubwordTokenizer(proto)
    label_ids = {sentencepiece.SentencePieceProcessor(model_proto=proto).piece_to_id(s) for s in symbols}
    config = DataConfig(dataset="toy", vocab_size=500, max_length=128, tokens_per_batch=1024)
    batches = {loss: list(make_corpus_dataset(corpus, "train", tokenizer, config, training=False).as_numpy_iterator())
               for loss, corpus in corpora.items()}
    words = labels = 0
    for ((source, target_input), every), ((source_l, target_input_l), scored) in zip(batches["all"], batches["labels"]):
        np.testing.assert_array_equal(source, source_l)
        np.testing.assert_array_equal(target_input, target_input_l)
        is_label = np.isin(every, list(label_ids | {EOS_ID}))
        np.testing.assert_array_equal(scored, np.where(is_label, every, PAD_ID))
        words += int(np.sum((every != PAD_ID) & ~is_label))
        labels += int(np.sum(is_label))
    assert len(batches["all"]) == len(batches["labels"]) and words > 0 and labels > 0
    # The training job's stream (training.data_stream) scores the same pieces.
    stream = training_stream(corpora["labels"], tokenizer, config).as_numpy_iterator()
    (_, target_input), target_output = next(stream)["batch"]
    assert np.isin(target_output[target_output != PAD_ID], list(label_ids | {EOS_ID})).all()
    assert (np.isin(target_input, list(label_ids)) | (target_input <= EOS_ID)).mean() < 1  # words go in


def test_a_label_one_linearization_cannot_hold_names_its_file_and_line(treebank):
    (treebank / "plus.mrg").write_text(TREES[0] + "\n\n(ROOT (S (NP+X (PRP We)) (VP (VBD left))))\n")
    files = {"train": treebank / "train.mrg", "validation": treebank / "plus.mrg"}
    assert TreebankCorpus(files).num_pairs("validation") == 2  # brackets hold "NP+X"
    with pytest.raises(TreebankFormatError, match=r"plus\.mrg:3: cannot label words with the constituent label 'NP\+X'"):
        TreebankCorpus(files, linearization="depth")


def test_answers_are_trees_over_the_sentence_or_repaired():
    tree, repairs = answer_tree("(S (VP (VB Go) (ADVP (RB away))) (. !))", "Go away !")
    assert repairs is None and tree.words() == ["Go", "away", "!"]
    tree, repairs = answer_tree("(S (VP (VB Go) (ADVP (RB away)) (. !)", "Go away !")  # unbalanced
    assert tree.to_string() == "(S (VP (VB Go) (ADVP (RB away)) (. !)))" and repairs.unclosed == 2
    tree, repairs = answer_tree("(S (VP (VB Go)) (. !))", "Go away !")  # a word missing
    assert tree.words() == ["Go", "away", "!"] and repairs.missing_words == 1
    tree, repairs = answer_tree("(S (VP (VB Come) (RB here)) (. !))", "Go away !")  # other words
    assert tree.to_string() == "(S (VP (VB Go) (RB away)) (. !))" and repairs.other_words
    assert answer_tree("", "  ") == (None, None)
    assert answer_tree("(NP (-LRB- -LRB-) (NN x))", "( x")[1] is None
    assert sequence_of_tree_text("(S (NP (DT a) (NN b)) junk ) )") == "(S (NP DT NN ) ) )"


def test_parse_scores_count_repairs_and_score_as_evalb():
    sentences = ["I saw a dog .", "Go away !"]
    references = ["(S (NP PRP I ) (VP VBD saw (NP DT a NN dog ) ) . . )", "(S (VP VB Go (ADVP RB away ) ) . ! )"]
    answers = ["(S (NP (PRP I)) (VP (VBD saw) (NP (DT a) (NN dog))) (. .))", "(S (VP (VB Go) (PRT (RP away))"]
    scores = parse_scores(sentences, answers, references)
    assert scores.repaired == 1 and scores.f1 == 100.0 and scores.sentences == 2  # ADVP = PRT
    assert scores.tagging_accuracy == pytest.approx(500 / 6)
    assert "2 sentences, 0 errors, 0 skipped; 1 answers needed repair" in scores.report()


def test_the_parser_of_a_run_writes_words_in_the_order_its_linearization_has(treebank, tmp_path):
    """parser_options reads the run's data config: a depth_word_first run's Parser copies each word
    before its tag; the same pairs, the same vocabulary, the other order."""
    from keras_transformer.data import DataConfig
    from keras_transformer.parsing.task import parser_options

    paths = (treebank / "train.mrg", treebank / "dev.mrg", treebank / "dev.mrg")
    sequences = {}
    for linearization in ("depth", "depth_word_first"):
        workdir = tmp_path / linearization
        workdir.mkdir()
        spec = treebank_spec(*paths, linearization)
        (workdir / "data_config.json").write_text(DataConfig(dataset=spec).to_json())
        assert parser_options(workdir)["word_first"] == (linearization == "depth_word_first")
        corpus = corpus_from_spec(spec)
        sequences[linearization] = next(corpus.pairs("train"))[1]
        assert gold_tree(*next(corpus.pairs("train"))).to_string() == "(S (NP (PRP I)) (VP (VBD saw) (NP (DT a) (NN dog))) (. .))"
    assert sequences == {"depth": "NP>PRP I +1S VBD saw +1VP DT a +1NP NN dog -2S . .",
                         "depth_word_first": "I NP>PRP +1S saw VBD +1VP a DT +1NP dog NN -2S . ."}
    assert corpus_from_spec(treebank_spec(*paths, "depth")).user_defined_symbols() == \
        corpus_from_spec(treebank_spec(*paths, "depth_word_first")).user_defined_symbols()
    assert parser_options(tmp_path / "no run")["word_first"] is False


@pytest.mark.parametrize("linearization", ["brackets", "depth", "depth_word_first"])
def test_a_targets_pieces_between_its_tree_tokens_are_the_sources_pieces_in_order(tmp_path, linearization):
    """What TransformerConfig.aligned_decoder counts on: matched in order against the source's pieces,
    every piece of the target that is no tree token is a copy, and every source piece is copied once.
    A tree token can be a word too (the tag "." and the word ".", both the user-defined piece "▁."):
    with each word first, the word's is the one taken for the copy, so the decoder reads the n-th
    word's memory at its pieces and its tree tokens; with the tag first, the tag is taken for the
    word's copy, one token early."""
    import re

    import numpy as np
    import sentencepiece
    import tensorflow as tf

    from keras_transformer.config import BOS_ID, EOS_ID, PAD_ID, TransformerConfig
    from keras_transformer.data import DataConfig, SubwordTokenizer, make_corpus_dataset
    from keras_transformer.data.tokenizer import TokenizerSettings, train_sentencepiece
    from keras_transformer.model import Transformer
    from keras_transformer.parsing.toy_treebank import write_toy_treebank

    paths = write_toy_treebank(tmp_path, sizes={"train": 60})
    corpus = TreebankCorpus({"train": paths["train"]}, linearization=linearization)
    symbols = corpus.user_defined_symbols()
    proto = train_sentencepiece(corpus.training_sentences(), TokenizerSettings(vocab_size=500,
                                                                                user_defined_symbols=symbols))
    pieces = sentencepiece.SentencePieceProcessor(model_proto=proto)
    tree_tokens = {pieces.piece_to_id(symbol) for symbol in symbols}
    depth_tokens = {pieces.piece_to_id(symbol) for symbol in symbols if re.fullmatch(r"\u2581[+-]\d+.*", symbol)}
    model = Transformer(TransformerConfig.from_preset("tiny", vocab_size=pieces.get_piece_size(), aligned_decoder=True))
    config = DataConfig(dataset="toy", vocab_size=500, max_length=128, tokens_per_batch=1024)
    pairs = copied_tree_tokens = 0
    for (source, target_input), _ in make_corpus_dataset(corpus, "train", SubwordTokenizer(proto), config,
                                                         training=False).as_numpy_iterator():
        counts = model._copied_counts(tf.constant(target_input), tf.constant(source)).numpy()
        copies = np.diff(counts, axis=1, prepend=0) == 1
        for source_row, target_row, copied, count in zip(source, target_input, copies, counts):
            source_pieces = np.count_nonzero((source_row != PAD_ID) & (source_row != EOS_ID))
            is_tree_token = np.isin(target_row, list(tree_tokens))
            assert copied[(target_row > EOS_ID) & ~is_tree_token].all()
            assert count[-1] == copied.sum() == source_pieces
            if linearization == "depth_word_first":  # a copied tree token starts a word: after BOS or a depth token
                previous = np.concatenate([[PAD_ID], target_row[:-1]])
                assert np.isin(previous[copied & is_tree_token], list(depth_tokens | {BOS_ID})).all()
            copied_tree_tokens += int(np.sum(copied & is_tree_token))
            pairs += 1
    assert pairs == 60 and copied_tree_tokens > 0  # the toy sentences end with ".", also a tag


def test_parsing_refuses_lowercased_text(treebank):
    spec = treebank_spec(treebank / "train.mrg", [treebank / "dev.mrg"], treebank / "dev.mrg")
    assert list(parsing_corpus(DataConfig(dataset=spec)).pairs("train"))
    with pytest.raises(ValueError, match="data.lowercase is for translation"):
        parsing_corpus(DataConfig(dataset=spec, lowercase=True))
