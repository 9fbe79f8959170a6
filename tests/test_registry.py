"""The pluggy registry: validation on registration, lookups, hook checking."""
import types

import pytest

from dpreg import hookimpl, hookspecs
from dpreg.errors import DpregError, DuplicateNameError, ParameterError, UnknownNameError
from dpreg.registry import DEFAULT_PLUGINS, KINDS, build_registry, get_loss, get_registry, parse_name_options


def _plugin(name, **hooks):
    mod = types.ModuleType(name)
    for k, f in hooks.items():
        setattr(mod, k, hookimpl(f))
    return mod


def test_every_kind_has_a_hook_spec_with_docstring():
    for kind, hook in hookspecs.KIND_HOOKS.items():
        spec = getattr(hookspecs, hook)
        assert spec.__doc__ and kind in KINDS


def test_builtins_registered_as_plugins():
    reg = build_registry(autoload=False)
    names = [p for p, _ in reg.pm.list_name_plugin()]
    assert set(DEFAULT_PLUGINS) <= set(names)
    assert {"logistic", "sigmoid-l2"} <= set(reg.names("loss"))
    assert {"dp-gd", "dp-sgd"} <= set(reg.names("algorithm"))
    assert reg.entry("loss", "logistic").package == "dpreg"


def test_duplicate_name_names_both_providers():
    def dpreg_register_losses(register):
        from dpreg_plugins.losses.linear import Logistic

        register("logistic", Logistic(), summary="again")

    with pytest.raises(DuplicateNameError) as e:
        build_registry(extra_plugins=(_plugin("evil_plugin", dpreg_register_losses=dpreg_register_losses),),
                       autoload=False)
    msg = str(e.value)
    assert "dpreg_plugins.losses.linear" in msg and "evil_plugin" in msg and "'logistic'" in msg


def test_unknown_name_lists_valid_ones():
    reg = build_registry(autoload=False)
    with pytest.raises(UnknownNameError) as e:
        reg.get("algorithm", "dp-sdg")
    assert "dp-sgd" in str(e.value) and "dp-gd" in str(e.value)


def test_misspelt_hook_is_an_error():
    def dpreg_register_loses(register):  # typo
        pass

    with pytest.raises(DpregError, match="matches no dpreg hook spec"):
        build_registry(extra_plugins=(_plugin("typo_plugin", dpreg_register_loses=dpreg_register_loses),),
                       autoload=False)


def test_registration_needs_summary_and_valid_name():
    def no_summary(register):
        register("x", object(), summary="")

    with pytest.raises(DpregError, match="summary"):
        build_registry(extra_plugins=(_plugin("p1", dpreg_register_losses=no_summary),), autoload=False)

    def bad_name(register):
        register("two words", object(), summary="s")

    with pytest.raises(DpregError, match="invalid"):
        build_registry(extra_plugins=(_plugin("p2", dpreg_register_losses=bad_name),), autoload=False)


def test_extra_plugin_registers_after_builtins():
    def dpreg_register_losses(register):
        from dpreg_plugins.losses.linear import Logistic

        register("my-logistic", Logistic(), summary="copy")

    reg = build_registry(extra_plugins=(_plugin("mine", dpreg_register_losses=dpreg_register_losses),),
                         autoload=False)
    assert reg.entry("loss", "my-logistic").provider == "mine"


def test_host_reaches_plugins_only_through_registry():
    # meta-test: dpreg/ never imports a built-in plugin module except the tuple of defaults
    import pathlib
    import re

    root = pathlib.Path(__file__).resolve().parents[1] / "dpreg"
    offenders = []
    for f in root.rglob("*.py"):
        for line in f.read_text().splitlines():
            if re.match(r"\s*(from|import)\s+dpreg_plugins", line):
                offenders.append(f"{f.relative_to(root)}: {line.strip()}")
    assert offenders == []


def test_kernels_import_neither_host_nor_plugins():
    import pathlib
    import re

    root = pathlib.Path(__file__).resolve().parents[1] / "kernels" / "dpreg_kernels"
    for f in root.glob("*.py"):
        text = f.read_text()
        assert not re.search(r"^\s*(from|import)\s+(dpreg|dpreg_plugins)\b", text, re.M), f.name


@pytest.mark.parametrize("spec, parsed", [
    ("adult", ("adult", {})),
    ("synthetic-logistic:n=200, d=5", ("synthetic-logistic", {"n": "200", "d": "5"})),
    ("mlp:hidden=64,32,activation=tanh", ("mlp", {"hidden": "64,32", "activation": "tanh"})),
])
def test_names_with_options(spec, parsed):
    """``name:key=value,...``; a part without ``=`` continues the value before it."""
    assert parse_name_options(spec) == parsed


@pytest.mark.parametrize("spec", ["mlp:64", "mlp:=3", "mlp:hidden=4,,"])
def test_malformed_options_are_one_line_errors(spec):
    with pytest.raises(ParameterError, match="name:key=value"):
        parse_name_options(spec)


def test_get_loss_configures_a_loss_factory():
    reg = get_registry()
    assert get_loss(reg, "logistic") is reg.get("loss", "logistic")
    from dpreg.pipeline import loss_spec_of

    mlp = get_loss(reg, "mlp:hidden=3")
    assert mlp.name == "mlp" and loss_spec_of(mlp, "") == "mlp:hidden=3"
    with pytest.raises(ParameterError, match="takes no options"):
        get_loss(reg, "logistic:c=1")
    with pytest.raises(ParameterError, match="bad options"):
        get_loss(reg, "mlp:widths=3")


def test_model_parses_loss_names_without_the_pipeline():
    """A released model is rebuilt from its loss name through the registry:
    dpreg.model does not import the run pipeline for it."""
    import pathlib
    import re

    text = (pathlib.Path(__file__).resolve().parents[1] / "dpreg" / "model.py").read_text()
    assert not re.search(r"from \.pipeline import .*get_loss", text)
    assert re.search(r"from \.registry import .*get_loss", text)
