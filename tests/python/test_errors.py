"""Bad input: hcnn's own messages come back as exceptions and the interpreter goes on."""

import shutil

import pytest

from conftest import CFG_SMALL, cli_train


def test_wrong_key_names_the_key(hcnn, tmp_path, capfd):
    with pytest.raises(hcnn.HcnnValueError, match="no_such_key") as e:
        hcnn.train(CFG_SMALL, no_such_key=3, checkpoint_dir=str(tmp_path), csv="")
    assert e.value.code == 1 and e.value.name == "HCNN_EINVAL"
    assert isinstance(e.value, ValueError) and isinstance(e.value, hcnn.HcnnError)
    if hasattr(hcnn._lib.lib, "hcnn_set_error_output"):
        assert "no_such_key" not in capfd.readouterr().err  # only through the exception
    # the same through the overrides= argument, and a dotted key
    with pytest.raises(hcnn.HcnnValueError, match="bogus"):
        hcnn.Session(CFG_SMALL, overrides={"model.blocks.0.bogus": 1})
    with pytest.raises(hcnn.HcnnValueError, match="lr"):
        hcnn.Session(CFG_SMALL, lr="fast")


def test_missing_config_file(hcnn, tmp_path):
    missing = tmp_path / "missing.yaml"
    with pytest.raises(hcnn.HcnnError, match="missing.yaml") as e:
        hcnn.train(missing)
    assert e.value.message and str(e.value) == e.value.message
    with pytest.raises(hcnn.HcnnError, match="missing.yaml"):
        hcnn.Loader(missing)


def test_missing_checkpoint(hcnn, tmp_path):
    with pytest.raises(hcnn.HcnnError, match="nothing.hcnn") as e:
        hcnn.load_checkpoint(tmp_path / "nothing.hcnn")
    assert e.value.code == 3  # HCNN_EIO
    with pytest.raises(hcnn.HcnnError, match="nothing.hcnn"):
        hcnn.evaluate(CFG_SMALL, tmp_path / "nothing.hcnn")
    with pytest.raises(hcnn.HcnnError, match="nothing.hcnn"):
        hcnn.train(CFG_SMALL, resume=tmp_path / "nothing.hcnn", checkpoint_dir=str(tmp_path / "r"),
                   csv="", progress=False)


def test_torn_checkpoint(hcnn, tmp_path):
    cli_train(CFG_SMALL, tmp_path / "ck", "epochs=1")
    good = tmp_path / "ck" / "final.hcnn"
    torn = tmp_path / "torn.hcnn"
    shutil.copy(good, torn)
    with open(torn, "r+b") as f:
        f.truncate(good.stat().st_size - 100)
    with pytest.raises(hcnn.HcnnError) as e:
        hcnn.load_checkpoint(torn)
    assert "torn.hcnn" in e.value.message and e.value.code in (3, 4)
    with pytest.raises(hcnn.HcnnError, match="torn.hcnn"):
        hcnn.evaluate(CFG_SMALL, torn)
    # the interpreter and the library go on: the good one still loads and evaluates
    assert len(hcnn.load_checkpoint(good)) == 6
    assert 0.0 <= hcnn.evaluate(CFG_SMALL, good)["test_acc"] <= 1.0


def test_python_arguments_refused_before_c(hcnn, tmp_path):
    nothing = tmp_path / "no-such.yaml"  # C would complain about this file first
    cases = [
        (lambda: hcnn.Loader(nothing, rank=2, world=2), "rank"),
        (lambda: hcnn.Loader(nothing, rank=-1), "rank"),
        (lambda: hcnn.Loader(nothing, world=0), "world"),
        (lambda: hcnn.Loader(nothing, split="validation"), "split"),
        (lambda: hcnn.Loader(nothing, epoch=-1), "epoch"),
        (lambda: hcnn.Loader(nothing, rank="0"), "rank"),
        (lambda: hcnn.Loader(nothing, world=True), "world"),
        (lambda: hcnn.train(nothing, overrides=["lr"]), "overrides"),
        (lambda: hcnn.train(nothing, overrides=["=3"]), "overrides"),
        (lambda: hcnn.train(nothing, overrides="lr=1"), "overrides"),
        (lambda: hcnn.train(nothing, overrides={3: 1}), "overrides"),
        (lambda: hcnn.train(nothing, lr=object()), "overrides"),
        (lambda: hcnn.train(nothing, lr=float("nan")), "overrides"),
        (lambda: hcnn.train(nothing, progress="yes"), "progress"),
        (lambda: hcnn.train(3.5), "config"),
        (lambda: hcnn.evaluate(nothing, None), "checkpoint"),
        (lambda: hcnn.bench(nothing, repeats=0), "repeats"),
        (lambda: hcnn.load_checkpoint(None), "path"),
        (lambda: hcnn.load_checkpoint(""), "path"),
    ]
    for call, word in cases:
        with pytest.raises(ValueError, match=word) as e:
            call()
        assert not isinstance(e.value, hcnn.HcnnError), (word, e.value)


def test_overrides_are_written_as_the_command_line_takes_them(hcnn):
    from hcnn._session import override_strings
    got = override_strings({"model.blocks.0.out": 12, "nesterov": True},
                           dict(lr=0.05, epochs=2, csv="", checkpoint_dir=None, shuffle=False,
                                weight_decay=1e-05, input=[1, 28, 28]))
    assert got == ["model.blocks.0.out=12", "nesterov=true", "lr=0.05", "epochs=2", 'csv=""',
                   "checkpoint_dir=~", "shuffle=false", "weight_decay=1e-05",
                   "input=[1, 28, 28]"]
    assert override_strings(["lr=0.1", "model.blocks.0.out=8"]) == ["lr=0.1",
                                                                    "model.blocks.0.out=8"]
    with hcnn.Session(CFG_SMALL, epochs=2, nesterov=True, overrides={"model.blocks.0.out": 12}) as s:
        text = s.config_text
        assert "epochs: 2" in text and "nesterov: true" in text and "out: 12" in text
        assert (s.rank, s.size) == (0, 1)
    assert s.closed
    with pytest.raises(ValueError, match="closed"):
        s.config_text


def test_string_overrides_are_the_strings_themselves(hcnn):
    """A str is that string, never YAML: "null", "~" and " " were an empty
    checkpoint_dir (no checkpoints), "runs/a #b" was runs/a, "'q'" was q.
    A number or a choice given as a string still reads as one."""
    for v, shown in [("null", '"null"'), ("~", '"~"'), (" ", '" "'), ("runs/a #b", '"runs/a #b"'),
                     ("'q'", '"\'q\'"'), ("!tag", '"!tag"'), ("a\\b", '"a\\\\b"'),
                     ('x"y', '"x\\"y"'), ("", '""'), ("runs/a", "runs/a")]:
        with hcnn.Session(CFG_SMALL, checkpoint_dir=v, lr="0.1", strategy="serial") as s:
            lines = [ln.strip() for ln in s.config_text.splitlines()]
        assert "checkpoint_dir: " + shown in lines, (v, [ln for ln in lines if "checkpoint" in ln])
        assert "lr: 0.1" in lines and "strategy: serial" in lines
    # raw YAML stays possible as a "key=value" string
    with hcnn.Session(CFG_SMALL, overrides=["checkpoint_dir=~"]) as s:
        assert 'checkpoint_dir: ""' in s.config_text
