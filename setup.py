"""keras_transformer: the Transformer of "Attention Is All You Need" in TensorFlow / Keras 3."""
from setuptools import find_packages, setup

setup(
    name="keras_transformer",
    version="0.1.0",
    description="The Transformer (Vaswani et al., 2017) as Keras 3 layers, trained with model.fit "
                "and exported as a SavedModel that TF Serving runs on raw strings.",
    python_requires=">=3.10",
    packages=find_packages(include=["keras_transformer", "keras_transformer.*", "pipelines"]),
    install_requires=[
        "tensorflow>=2.21,<2.22",
        "keras>=3.15",
        "tensorflow-text>=2.21.1",  # 2.21.0 fails to import
        "sentencepiece>=0.2",
        "sacrebleu>=2.4",
        "tensorboard>=2.21",
        "tensorflow-datasets>=4.9",
        "tensorflow-serving-api>=2.21,<2.22",
        "num2words>=0.5",
        "tqdm>=4.60",
        "matplotlib>=3.8",
    ],
    extras_require={
        "test": ["pytest>=8", "pytest-xdist>=3.5", "nbclient>=0.10", "nbformat>=5.10", "jupytext>=1.16", "ipykernel>=6"],
    },
)
