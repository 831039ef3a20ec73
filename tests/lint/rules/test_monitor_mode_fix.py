"""TM102's repair: the mode the metric's name says, passed where the call can take it."""

from __future__ import annotations

import textwrap

from lint_fix_kit import repaired, unfixable

from trainmedic.lint import get_rule


def test_keras_callbacks_get_the_mode_their_metric_says():
    after = repaired(
        """
        from tensorflow import keras
        stop = keras.callbacks.EarlyStopping(monitor='val_dice', patience=5)
        plateau = keras.callbacks.ReduceLROnPlateau(monitor="val_f1", mode="auto")
        """,
        "TM102",
    )
    assert after == textwrap.dedent(
        """
        from tensorflow import keras
        stop = keras.callbacks.EarlyStopping(monitor='val_dice', patience=5, mode='max')
        plateau = keras.callbacks.ReduceLROnPlateau(monitor="val_f1", mode="max")
        """
    )


def test_one_argument_per_line_gets_its_own_line():
    after = repaired(
        """
        import keras
        best = keras.callbacks.ModelCheckpoint(
            "best.keras",
            monitor="val_auc",
            save_best_only=True,
        )
        """,
        "TM102",
    )
    assert '    save_best_only=True,\n    mode="max",\n)\n' in after


def test_a_lightning_callback_on_accuracy_gets_max():
    after = repaired(
        """
        from lightning.pytorch.callbacks import ModelCheckpoint
        keep = ModelCheckpoint(dirpath="ckpt", monitor="val_acc", save_top_k=3)
        """,
        "TM102",
    )
    assert 'ModelCheckpoint(dirpath="ckpt", monitor="val_acc", save_top_k=3, mode="max")' in after


def test_a_metric_function_named_like_an_error_gets_min():
    # Seed 000 #7: Keras 3 raised ValueError after the first epoch for this one.
    after = repaired(
        """
        from tensorflow import keras
        stop = keras.callbacks.EarlyStopping(monitor="val_bit_error_rate", patience=5)
        """,
        "TM102",
    )
    assert 'EarlyStopping(monitor="val_bit_error_rate", patience=5, mode="min")' in after


def test_a_name_that_says_neither_is_left_to_the_user():
    [reason] = unfixable(
        """
        import keras
        stop = keras.callbacks.EarlyStopping(monitor="val_custom_score")
        """,
        "TM102",
    )
    assert reason == (
        "the metric's name does not say whether it should go up or down; pass mode='min' or "
        "mode='max' yourself"
    )


def test_the_cards_example_repairs_to_a_clean_call():
    after = repaired(get_rule("TM102").before, "TM102")
    assert 'patience=5, restore_best_weights=True, mode="min")' in after
