"""The Transformer's layers, one concept per file."""
from keras_transformer.layers.attention import MultiHeadAttention
from keras_transformer.layers.decoder import Decoder, DecoderLayer
from keras_transformer.layers.dropout import Dropout
from keras_transformer.layers.embedding import TokenEmbedding
from keras_transformer.layers.encoder import Encoder, EncoderLayer
from keras_transformer.layers.feed_forward import PositionwiseFeedForward
from keras_transformer.layers.positional import LearnedPositionalEmbedding, SinusoidalPositionalEncoding
