"""TM103: raw TensorFlow ops on Keras symbolic tensors while a functional model is built."""

import sys
import textwrap

import pytest

from trainmedic.lint import get_rule, lint_source


def test_seed_tf_shape_in_a_helper_called_with_an_input(lint):
    source = """
        import tensorflow as tf
        from tensorflow.keras import layers

        def attention_block(x, key_dim=64):
            batch_size = tf.shape(x)[0]
            height, width, channels = x.shape[1:]
            x_reshaped = layers.Reshape((height * width, channels))(x)
            attn = layers.MultiHeadAttention(num_heads=4, key_dim=key_dim)(x_reshaped, x_reshaped)
            return layers.Reshape((height, width, channels))(attn)

        def build_receiver(input_shape):
            inputs = tf.keras.Input(shape=input_shape)
            x = layers.Conv2D(64, 3, padding="same")(inputs)
            x = layers.MaxPooling2D((2, 2))(x)
            x = attention_block(x, key_dim=64)
            return tf.keras.Model(inputs, layers.Dense(2)(x))
    """
    [(line, message)] = lint(source, "TM103")
    assert line == 6
    assert "tf.shape() on Keras symbolic tensor `x`" in message
    assert "KerasTensor cannot be used as input to a TensorFlow function" in message
    assert "x.shape" in message and "keras.ops.shape(x)" in message and "Lambda" in message


def test_dataflow_through_layers_instances_slices_and_lists(lint):
    source = """
        import tensorflow as tf
        import keras
        from keras import layers

        inputs = keras.Input(shape=(32, 32, 3))
        conv = layers.Conv2D(16, 3)
        h = conv(inputs)
        h = tf.nn.relu(h)
        branches = []
        for c in range(3):
            branches.append(layers.Dense(8)(h[..., c : c + 1]))
        merged = tf.concat(branches, axis=-1)
        scaled = merged * 0.5 + 1.0
        pooled = tf.reduce_mean(scaled, axis=[1, 2])
        model = keras.Model(inputs, pooled)
    """
    found = lint(source, "TM103")
    assert [line for line, _ in found] == [9, 13, 15]
    assert "tf.concat() on Keras symbolic tensor `branches`" in found[1][1]
    assert "keras.ops.concatenate" in found[1][1] and "keras.ops.mean" in found[2][1]


def test_one_finding_per_line_and_per_nested_expression(lint):
    source = """
        import tensorflow as tf
        from tensorflow import keras

        inputs = keras.Input(shape=(None, None, 3))
        logits = keras.layers.Conv2D(1, 1)(inputs)
        logits = logits[:, : tf.shape(inputs)[1], : tf.shape(inputs)[2], :]
        area = tf.reduce_sum(tf.ones_like(logits), axis=[1, 2])
    """
    found = lint(source, "TM103")
    assert [line for line, _ in found] == [7, 8]
    assert "tf.ones_like() on Keras symbolic tensor `logits`" in found[1][1]


def test_pretrained_model_output_is_symbolic(lines):
    source = """
        import tensorflow as tf

        base = tf.keras.applications.ResNet50(include_top=False, weights="imagenet")
        features = tf.reduce_mean(base.output, axis=[1, 2])
        skip = base.get_layer("conv4_block6_out").output
        skip = tf.image.resize(skip, (28, 28))
    """
    assert lines(source, "TM103") == [5, 7]


def test_real_tensors_and_static_shapes_are_not_flagged(lines):
    source = """
        import tensorflow as tf
        from tensorflow import keras
        from tensorflow.keras import layers

        class Attention(layers.Layer):
            def call(self, x):
                batch = tf.shape(x)[0]
                return tf.reshape(x, (batch, -1, x.shape[-1]))

        def split_heads(t):
            return tf.transpose(t, (0, 2, 1))

        def scale(t):
            return t * tf.cast(tf.shape(t)[-1], t.dtype)

        def build():
            inputs = keras.Input(shape=(16, 64))
            x = Attention()(inputs)
            x = layers.Lambda(split_heads)(x)
            x = layers.Lambda(lambda t: tf.math.l2_normalize(t, axis=-1))(x)
            x = layers.Lambda(function=scale)(x)
            n = tf.cast(x.shape[1], tf.float32)
            dims = keras.ops.shape(x)
            flat = tf.nest.flatten([x])
            return keras.Model(inputs, x)

        @tf.function
        def train_step(model, x, y):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
            return loss

        inputs = keras.Input(shape=(4,))
        for inputs, labels in dataset:
            tf.shape(inputs)
        data = tf.random.normal((8, 4))
        tf.reduce_sum(data)
    """
    assert lines(source, "TM103") == []


def test_custom_layer_output_is_symbolic_but_its_call_is_not(lines):
    source = """
        import tensorflow as tf
        from tensorflow import keras

        class PositionalEncoding(keras.layers.Layer):
            def call(self, x):
                positions = tf.range(tf.shape(x)[1])
                return x + tf.cast(positions[None, :, None], x.dtype)

        tokens = keras.Input(shape=(128, 64))
        encoded = PositionalEncoding()(tokens)
        mask = tf.sequence_mask(tf.reduce_sum(tf.ones_like(encoded[..., 0]), axis=-1))
    """
    assert lines(source, "TM103") == [12]


def test_helpers_never_given_a_symbolic_tensor_are_left_alone(lines):
    source = """
        import tensorflow as tf
        from tensorflow.keras import layers

        def residual(x, filters):
            shortcut = x
            x = layers.Conv2D(filters, 3, padding="same")(x)
            return tf.nn.relu(x + shortcut)
    """
    assert lines(source, "TM103") == []


def test_legacy_tf_keras_is_not_flagged(lines):
    source = """
        import tensorflow as tf
        import tf_keras as keras

        inputs = keras.Input(shape=(8,))
        batch = tf.shape(inputs)[0]
    """
    assert lines(source, "TM103") == []


def test_match_cases_are_branches(lines):
    source = """
        import tensorflow as tf
        from tensorflow import keras

        def build(source, raw, head):
            match source:
                case "tfrecord":
                    feats = tf.io.parse_tensor(raw, tf.float32)
                case _:
                    feats = keras.Input(shape=(128,))
                    width = tf.shape(feats)[1]
            batch = tf.shape(feats)[0]
            x = keras.Input(shape=(3072,))
            match head:
                case "wide":
                    x = keras.layers.Dense(1024)(x)
                case _:
                    x = keras.layers.Dense(256)(x)
            return tf.reduce_mean(x)
    """
    assert lines(source, "TM103") == [11, 19]


@pytest.mark.parametrize(
    "handler",
    [
        "except",
        pytest.param(
            "except*", marks=pytest.mark.skipif(sys.version_info < (3, 11), reason="except* is Python 3.11+")
        ),
    ],
)
def test_try_blocks_are_branches_with_or_without_a_star(lines, handler):
    source = f"""
        import tensorflow as tf
        from tensorflow import keras

        features = tf.zeros((1, 128))
        try:
            features = keras.Input(shape=(128,))
            n = tf.shape(features)[0]
        {handler} (ValueError, TypeError):
            pass
        batch = tf.shape(features)[0]
    """
    assert lines(source, "TM103") == [8]


def test_long_and_deeply_nested_arguments(lint):
    terms = " + ".join(["x"] * 900)
    source = f"""
        import tensorflow as tf
        from tensorflow import keras

        x = keras.Input(shape=(3,))
        total = tf.reduce_sum({terms})
        short = tf.reduce_sum(x + x + x + x + x + x + x + x + x + x + x + x)
        deep = tf.abs(x{"[0]" * 600})
    """
    found = lint(source, "TM103")
    assert [line for line, _ in found] == [6, 7]
    assert "`x + x + x + x + x + x + x + x + x + x...`" in found[0][1]
    assert "`x + x + x + x + x + x + x + x + x + x...`" in found[1][1]


def test_noqa_silences_the_line():
    source = textwrap.dedent("""
        import tensorflow as tf
        from tensorflow import keras
        inputs = keras.Input(shape=(8,))
        a = tf.shape(inputs)  # noqa: TM103
        b = tf.shape(inputs)
    """)
    assert [v.line for v in lint_source(source, rules=[get_rule("TM103")])] == [6]
