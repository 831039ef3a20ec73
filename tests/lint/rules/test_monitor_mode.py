"""TM102: callbacks that guess the direction of the metric they monitor."""

import textwrap

from trainmedic.lint import get_rule, lint_source


def test_seed_custom_metric_crashes_keras_3(lint):
    source = """
        from tensorflow import keras

        def bit_error_rate(y_true, y_pred):
            return keras.ops.mean(keras.ops.not_equal(y_true, keras.ops.round(y_pred)))

        model.compile(optimizer="adam", loss="binary_crossentropy", metrics=[bit_error_rate])
        callbacks = [
            keras.callbacks.EarlyStopping(
                monitor="val_bit_error_rate",
                patience=5,
                restore_best_weights=True,
            ),
            keras.callbacks.ReduceLROnPlateau("val_bit_error_rate", factor=0.5, patience=2),
        ]
    """
    [(line, message), (line2, message2)] = lint(source, "TM102")
    assert (line, line2) == (9, 14)
    assert "val_bit_error_rate" in message and "raises ValueError" in message and "mode='min'" in message
    assert "Keras >= 3.11" in message2


def test_higher_is_better_custom_metric_names_both_failures(lint):
    source = """
        import tensorflow as tf
        from tensorflow.keras.callbacks import ModelCheckpoint

        model.compile("adam", loss=dice_loss, metrics=[dice_coef])
        ckpt = ModelCheckpoint("best.h5", monitor="val_dice_coef", save_best_only=True)
        stop = tf.keras.callbacks.EarlyStopping(monitor="val_dice_coef", mode="auto", patience=10)
    """
    [(_, message), (_, message2)] = lint(source, "TM102")
    assert "mode='max'" in message and "tf.keras 2 silently guesses mode='min'" in message
    assert "EarlyStopping(monitor='val_dice_coef')" in message2


def test_builtin_metric_that_old_keras_minimises_is_a_silent_bug(lint):
    source = """
        import keras

        model.compile(optimizer="adam", loss="binary_crossentropy", metrics=[keras.metrics.AUC(name="auc")])
        keras.callbacks.ModelCheckpoint("m.keras", monitor="val_auc", save_best_only=True)
        keras.callbacks.EarlyStopping(monitor="val_auc", patience=3)
        keras.callbacks.EarlyStopping(monitor="val_precision", patience=3)
        keras.callbacks.ReduceLROnPlateau(monitor="val_precision_1", patience=3)
    """
    found = lint(source, "TM102")
    assert [line for line, _ in found] == [5, 7, 8]
    assert "higher-is-better" in found[0][1] and "worst one" in found[0][1] and "raises" not in found[0][1]
    assert "tf.keras 2 guesses mode='min'" in found[1][1]
    assert "restore_best_weights" not in found[1][1]
    assert "raises" not in found[2][1] and "the learning rate is cut" in found[2][1]


def test_restore_best_weights_is_named_only_when_it_is_on(lint):
    source = """
        from tensorflow import keras

        model.compile("adam", loss="sparse_categorical_crossentropy", metrics=[keras.metrics.Precision()])
        callbacks = [
            keras.callbacks.EarlyStopping(monitor="val_precision", patience=3),
            keras.callbacks.EarlyStopping(monitor="val_precision", patience=3, restore_best_weights=False),
            keras.callbacks.EarlyStopping("val_precision", 0, 3, 0, "auto", None, True),
            keras.callbacks.EarlyStopping(monitor="val_precision", restore_best_weights=True),
            keras.callbacks.ReduceLROnPlateau(monitor="val_precision", patience=2),
        ]
    """
    found = lint(source, "TM102")
    assert [line for line, _ in found] == [6, 7, 8, 9, 10]
    keeps_worst = ["restore_best_weights keeps the worst epoch" in message for _, message in found]
    assert keeps_worst == [False, False, True, True, False]
    assert all("training stops while it is still improving" in m for _, m in found[:4])
    assert "tf.keras 2 guesses mode='min'" in found[0][1]
    assert "tf.keras 2 and Keras < 3.11 guess mode='min'" in found[4][1]


def test_per_output_log_key_of_a_multi_output_model(lint):
    source = """
        from tensorflow import keras

        model.compile("adam", loss={"mask": "bce", "has_fg": "bce"}, metrics={"has_fg": ["accuracy"]})
        keras.callbacks.EarlyStopping(monitor="val_has_fg_accuracy", patience=8)
    """
    [(_, message)] = lint(source, "TM102")
    assert "named has_fg_accuracy, but the compiled one is named accuracy" in message
    assert "mode='max'" in message


def test_monitor_held_in_a_variable_of_the_same_scope(lines):
    source = """
        from keras import callbacks

        def make_callbacks(path):
            monitor = "val_psnr"
            return [callbacks.ModelCheckpoint(path, monitor=monitor, save_best_only=True)]
    """
    assert lines(source, "TM102") == [6]


def test_lightning_accuracy_with_default_min_mode(lint):
    source = """
        import pytorch_lightning as pl
        from lightning.pytorch.callbacks import EarlyStopping

        checkpoint = pl.callbacks.ModelCheckpoint(dirpath="ckpt", monitor="val/acc", save_top_k=3)
        stopper = EarlyStopping("val_f1", patience=5)
        detector = pl.callbacks.ModelCheckpoint(monitor="val/mAP50", save_last=True)
        fine = pl.callbacks.ModelCheckpoint(monitor="val_loss")
        also_fine = EarlyStopping(monitor="val_acc", mode="max")
    """
    found = lint(source, "TM102")
    assert [line for line, _ in found] == [5, 6, 7]
    assert "Lightning's default mode='min'" in found[0][1] and "mode='max'" in found[0][1]


def test_known_directions_and_explicit_modes_are_not_flagged(lines):
    source = """
        import tensorflow as tf
        from tensorflow import keras
        from lightning.pytorch.callbacks import ModelCheckpoint as PLCheckpoint

        keras.callbacks.EarlyStopping(patience=3)
        keras.callbacks.EarlyStopping(monitor="val_loss", patience=3)
        keras.callbacks.EarlyStopping(monitor="loss")
        keras.callbacks.EarlyStopping(monitor="val_accuracy", restore_best_weights=True)
        keras.callbacks.ModelCheckpoint("m.h5", monitor="val_accuracy", save_best_only=True)
        keras.callbacks.ReduceLROnPlateau(monitor="val_mae")
        keras.callbacks.EarlyStopping(monitor="val_bit_error_rate", mode="min")
        keras.callbacks.ModelCheckpoint("m.h5", "val_iou", 1, True, False, "max")
        keras.callbacks.EarlyStopping(monitor=args.monitor)
        keras.callbacks.EarlyStopping(monitor=f"val_{name}")
        keras.callbacks.EarlyStopping(monitor="val_dice", **cfg)
        keras.callbacks.ModelCheckpoint("m.h5", monitor="val_auc")
        PLCheckpoint(monitor="val_wer")
        PLCheckpoint(monitor="val_acc", save_top_k=0)
        PLCheckpoint(monitor="val_acc", mode="max")
    """
    assert lines(source, "TM102") == []


def test_named_builtin_metric_is_resolved_by_keras_3(lines):
    source = """
        from tensorflow import keras

        model.compile("adam", "categorical_crossentropy", metrics=[keras.metrics.MeanIoU(3, name="iou")])
        keras.callbacks.EarlyStopping(monitor="val_iou", patience=3)
        keras.callbacks.EarlyStopping(monitor="val_miou", patience=3)
    """
    # val_iou is resolved by Keras 3 but tf.keras 2 minimises it; val_miou is unknown to Keras 3.
    assert lines(source, "TM102") == [5, 6]


def test_noqa_and_non_keras_callbacks():
    source = textwrap.dedent("""
        from tensorflow import keras
        from mylib.callbacks import EarlyStopping

        EarlyStopping(monitor="val_dice")
        keras.callbacks.EarlyStopping(monitor="val_dice")  # noqa: TM102
        keras.callbacks.EarlyStopping(monitor="val_dice")
    """)
    assert [v.line for v in lint_source(source, rules=[get_rule("TM102")])] == [7]
