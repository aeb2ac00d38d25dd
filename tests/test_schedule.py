import keras
import numpy as np
import pytest

from keras_transformer import Transformer, TransformerSchedule


def _formula(step, d_model=512, warmup=4000):
    return d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)


@pytest.mark.parametrize("step", [1, 4000, 100_000])
def test_schedule_equals_the_formula(step):
    schedule = TransformerSchedule(512, 4000)
    # The optimizer passes its iteration count, 0 at the first step: step s is iteration s - 1.
    assert float(schedule(step - 1)) == pytest.approx(_formula(step), rel=1e-6)


def test_schedule_peaks_at_the_warmup_step():
    schedule = TransformerSchedule(512, 4000)
    rates = np.array([float(schedule(i)) for i in range(0, 12000, 7)] + [float(schedule(3999))])
    assert rates.max() == pytest.approx(float(schedule(3999)))
    assert float(schedule(3999)) == pytest.approx(512 ** -0.5 * 4000 ** -0.5, rel=1e-6)
    assert float(schedule(3998)) < float(schedule(3999)) > float(schedule(4000))


def test_schedule_serializes():
    schedule = TransformerSchedule(256, 100, scale=2.0)
    clone = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(schedule))
    assert float(clone(50)) == pytest.approx(float(schedule(50)))


def test_a_peak_learning_rate_scales_the_papers_curve():
    from keras_transformer import paper_optimizer
    from keras_transformer.config import TrainConfig

    schedule = paper_optimizer(128, TrainConfig(warmup_steps=2000, peak_learning_rate=0.005))._learning_rate
    assert float(schedule(1999)) == pytest.approx(0.005, rel=1e-6)  # the peak, at the warm-up step
    assert float(schedule(7999)) == pytest.approx(0.005 * (2000 / 8000) ** 0.5, rel=1e-6)
    assert float(schedule(0)) == pytest.approx(0.005 / 2000, rel=1e-6)
    with pytest.raises(ValueError, match="peak_learning_rate must be None"):
        TrainConfig(peak_learning_rate=0.0)


def test_compile_defaults_to_the_papers_adam():
    model = Transformer.from_preset("tiny")
    model.compile()
    optimizer = model.optimizer
    assert isinstance(optimizer, keras.optimizers.Adam)
    assert (optimizer.beta_1, optimizer.beta_2, optimizer.epsilon) == (0.9, 0.98, 1e-9)
    assert isinstance(optimizer.learning_rate if isinstance(optimizer.learning_rate, TransformerSchedule)
                      else optimizer._learning_rate, TransformerSchedule)
