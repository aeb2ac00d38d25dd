"""The tag dictionary learned from train trees: frequent words keep their tags, the rest share the
rare words' tags, and it survives its JSON file."""
import pytest

from keras_transformer.parsing import parse_tree
from keras_transformer.parsing.tag_dictionary import (FILENAME, TagDictionary, build_tag_dictionary,
                                                      read_tag_dictionary, write_tag_dictionary)

TREES = ["(S (NP (DT the) (NN dog)) (VP (VBD saw) (NP (DT the) (NN cat))) (. .))",
         "(S (NP (DT the) (NN saw)) (VP (VBD cut) (NP (NNP Ben) (CD 1½))) (. .))",
         "(S (NP (PRP she)) (VP (VBD saw) (NP (DT the) (NNS cats))) (. !) (: --))"]


def test_frequent_words_keep_their_tags_and_the_rest_share_the_rare_words_tags_of_their_shape():
    dictionary = build_tag_dictionary([parse_tree(text) for text in TREES], min_count=2)
    # "the" 4 times, "saw" 3 (VBD twice, NN once), "." twice; the other words once each
    assert dictionary.words == {"the": ("DT",), "saw": ("NN", "VBD"), ".": (".",)}
    assert dictionary.other == {"alphanumeric": ("CD", "NN", "NNP", "NNS", "PRP", "VBD"), "symbols": (".", ":")}
    assert dictionary.allowed("Zorp") == dictionary.allowed("½") == dictionary.other["alphanumeric"]
    assert dictionary.allowed("?!") == dictionary.allowed("--") == (".", ":")
    assert dictionary.allowed("the") == ("DT",) and dictionary.allowed(".") == (".",)
    assert dictionary.tags() == {"DT", ".", ":", "CD", "NN", "NNP", "NNS", "PRP", "VBD"}
    everything = build_tag_dictionary([parse_tree(text) for text in TREES], min_count=1)
    assert everything.other == {"alphanumeric": (), "symbols": ()} and everything.allowed("Zorp") == ()
    assert everything.words["dog"] == ("NN",) and len(everything.words) == 12
    with pytest.raises(ValueError, match="min_count must be >= 1; got 0"):
        build_tag_dictionary([], min_count=0)


def test_the_file_round_trips_and_a_bad_one_is_named(tmp_path):
    assert read_tag_dictionary(tmp_path) is None
    dictionary = TagDictionary(words={"the": ("DT",), "(": ("-LRB-",), "ß": ("NN", "NNP")},
                               other={"alphanumeric": ("NN",), "symbols": ()}, min_count=3)
    path = write_tag_dictionary(tmp_path, dictionary)
    assert path == tmp_path / FILENAME and [p.name for p in tmp_path.iterdir()] == [FILENAME]
    assert read_tag_dictionary(tmp_path) == dictionary
    path.write_text('{"words": []}')
    with pytest.raises(ValueError, match=f"{path}: not a tag dictionary"):
        read_tag_dictionary(tmp_path)
