"""The parsing task's pieces: the treebank corpus, answers checked (and repaired) against their
sentences, and the scores of a set of answers."""
import pytest

from keras_transformer.parsing.corpus import TreebankCorpus, corpus_from_spec, gold_tree, parse_spec, treebank_spec
from keras_transformer.parsing.treebank import TreebankFormatError
from keras_transformer.parsing.task import answer_tree, parse_scores, sequence_of_tree_text

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
