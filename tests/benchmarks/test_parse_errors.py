"""benchmarks/parse_errors.py on hand-made trees: the figures as parsed, with the gold tags, by label,
by sentence length, by tagging and by the width of the brackets."""
import json

from benchmarks import parse_errors

GOLD = ["(ROOT (S (NP-SBJ (DT The) (NN dog)) (VP (VBD barked)) (. .)))",
        "(ROOT (S (NP (PRP It)) (VP (VBD ran) (PP (IN to) (NP (DT the) (NN park) (CC and) (DT the) (NN lake) "
        "(IN in) (DT the) (NN town)))) (. .)))"]
# The first answer tags the period NN (a length error EVALB leaves out); the second attaches the PP high.
PARSED = ["(S (NP (DT The) (NN dog)) (VP (VBD barked)) (NN .))",
          "(S (NP (PRP It)) (VP (VBD ran)) (PP (IN to) (NP (DT the) (NN park) (CC and) (DT the) (NN lake) "
          "(IN in) (DT the) (NN town))) (. .))"]


def test_the_breakdown_of_two_sentences(tmp_path, capsys):
    gold, parsed = tmp_path / "gold.ptb", tmp_path / "parsed.txt"
    gold.write_text("\n".join(GOLD) + "\n")
    parsed.write_text("\n".join(PARSED) + "\n")
    parse_errors.main(["--gold", str(gold), "--write-words", str(tmp_path / "words")])
    assert (tmp_path / "words").read_text().splitlines()[0] == "The dog barked ."
    parse_errors.main(["--gold", str(gold), "--parsed", str(parsed)])
    record = json.loads(capsys.readouterr().out.splitlines()[-1])
    # As parsed: sentence 1 is an error; sentence 2 matches S, NP (It), PP and NP (the park ...) of 5.
    assert record["as_parsed"]["error_sentences"] == 1 and record["as_parsed"]["recall"] == 80.0
    # With the gold tags, sentence 1 scores its 3 brackets too: 7 of 8.
    assert record["gold_tags"]["error_sentences"] == 0 and record["gold_tags"]["recall"] == 87.5
    assert record["labels"]["VP"] == {"gold": 1, "test": 1, "matched": 0, "recall": 0.0, "precision": 0.0, "f1": 0.0}
    assert record["lengths"]["11-20"]["recall"] == 80.0 and record["lengths"]["1-10"]["error_sentences"] == 1
    assert ">40" not in record["lengths"]  # no sentence that long
    # Sentence 1 has a tag wrong (and is an error), sentence 2 every tag right.
    assert record["tagging"] == {"1-10": {"a_tag_wrong": record["lengths"]["1-10"]},
                                 "11-20": {"every_tag_right": record["lengths"]["11-20"]}}
    # Sentence 2's 11 words after the period's deletion: S spans them all, NP (It) 1 word, the gold VP, PP
    # and NP 10, 9 and 8; the answer's VP (ran) 1 word.
    assert record["widths"] == {
        "1": {"gold": 1, "test": 2, "matched": 1, "recall": 100.0, "precision": 50.0},
        "6+": {"gold": 3, "test": 2, "matched": 2, "recall": 66.67, "precision": 100.0},
        "sentence": {"gold": 1, "test": 1, "matched": 1, "recall": 100.0, "precision": 100.0}}
