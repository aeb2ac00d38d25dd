"""English constituency parsing as sequence to sequence (the paper's section 6.3): treebanks, trees as
token sequences and back, and EVALB's scores. The model, its layers, decoding and the training job
never see a tree: this package hands them (sentence, sequence) text pairs and turns their output
sequences into trees."""
from keras_transformer.parsing.evalb import BracketCounts, EvalbResult, evalb
from keras_transformer.parsing.linearization import Repairs, linearize, rebuild, repair
from keras_transformer.parsing.treebank import TreebankFormatError, read_treebank, treebank_files
from keras_transformer.parsing.trees import Tree, TreeFormatError, parse_tree, preprocess
