"""Reading trees and treebanks: layouts, preprocessing, and errors that name the file and line."""
import pytest

from keras_transformer.parsing import TreebankFormatError, TreeFormatError, parse_tree, preprocess, read_treebank
from keras_transformer.parsing.treebank import treebank_files
from keras_transformer.parsing.trees import strip_function_tags

WSJ_MRG = """( (S
    (NP-SBJ-1 (NNP Pierre) (NNP Vinken) )
    (VP (MD will)
      (VP (VB join)
        (NP (-NONE- *-1) )
        (NP (DT the) (NN board) )))
    (. .) ))
( (S
    (NP-SBJ (PRP He) )
    (VP (VBD left) )
    (. .) ))
"""


def test_preprocess_drops_empty_elements_function_tags_and_the_root():
    tree = preprocess(parse_tree(WSJ_MRG.split("\n( (S")[0]))
    assert tree.to_string() == ("(S (NP (NNP Pierre) (NNP Vinken)) (VP (MD will) (VP (VB join) "
                                "(NP (DT the) (NN board)))) (. .))")
    assert preprocess(parse_tree("(ROOT (NP-TMP=2 (NN today)))")).to_string() == "(NP (NN today))"
    assert preprocess(parse_tree("(TOP (S (NP (-NONE- *)) (VP (VB go))))")).to_string() == "(S (VP (VB go)))"
    assert preprocess(parse_tree("(ROOT (NP (-NONE- *)))")) is None


def test_strip_function_tags_keeps_labels_that_start_with_a_hyphen():
    assert [strip_function_tags(label) for label in ("NP-SBJ-1", "S-NOM-SBJ", "NP=2", "-NONE-", "-LRB-", "PRP$")] == [
        "NP", "S", "NP", "-NONE-", "-LRB-", "PRP$"]


def test_multiline_mrg_files_one_tree_per_line_and_directories(tmp_path):
    (tmp_path / "wsj").mkdir()
    (tmp_path / "wsj" / "wsj_0001.mrg").write_text(WSJ_MRG)
    # With a byte-order mark, as files saved on Windows begin.
    (tmp_path / "wsj" / "wsj_0002.mrg").write_text("\ufeff(ROOT (S (NP-SBJ (PRP It)) (VP (VBZ works))))\n"
                                                  "(ROOT (FRAG (NP (NN Fine)) (. !)))  (ROOT (INTJ (UH Yes)))\n",
                                                  encoding="utf-8")
    (tmp_path / "wsj" / "README").write_text("not a tree")
    trees = list(read_treebank(tmp_path / "wsj"))
    assert [tree.label for tree in trees] == ["S", "S", "S", "FRAG", "INTJ"]
    assert trees[1].words() == ["He", "left", "."]
    assert list(read_treebank([tmp_path / "wsj" / "wsj_0002.mrg", tmp_path / "wsj" / "wsj_0001.mrg"]))[3] == trees[0]
    assert len(treebank_files(tmp_path / "wsj")) == 2


@pytest.mark.parametrize("text, line, what", [
    ("(S (NP (NN a)))\n(S (NP (NN b))\n", 2, "never closed"),
    ("(S (NP (NN a)))\nhello (S (NN b))\n", 2, "text outside any tree"),
    ("(S (NP (NN a)))\n\n(S (NP ) (VB b))\n", 3, "holds no words"),
    ("(S (NP (NN a)))\n(S (NP a b))\n", 2, "several words or words beside brackets"),
    ("(S (NP (NN a)))\n(ROOT (NP (-NONE- *)))\n", 2, "no words"),
])
def test_bad_treebanks_name_the_file_the_line_and_what_is_wrong(tmp_path, text, line, what):
    path = tmp_path / "bad.mrg"
    path.write_text(text)
    with pytest.raises(TreebankFormatError, match=rf"^{path}:{line}: .*{what}"):
        list(read_treebank(path))


def test_parse_tree_errors():
    for text, what in (("", "empty"), ("(S (NN a)) )", "after the end"), ("(S (NN a)", "never closed"),
                       ("( a)", "holds no words"), ("(NP dog (NN cat))", "several words or words beside brackets")):
        with pytest.raises(TreeFormatError, match=what):
            parse_tree(text)


def test_missing_paths_are_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="not found"):
        list(read_treebank(tmp_path / "absent.mrg"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no treebank files"):
        list(read_treebank(tmp_path / "empty"))
