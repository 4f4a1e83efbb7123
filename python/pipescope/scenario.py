"""pipescope.Scenario: a scenario file, a dict, or a Hugging Face config.json on
top of one, with overrides, as the command line's scenario options take them."""

import copy
import json
import os


class Scenario:
    """A scenario as the commands read it.

    Scenario("scenarios/demo.json") reads a file, Scenario({...}) takes a dict
    (named "<dict>" in messages), Scenario.from_hf_config(base, "config.json",
    seq_len=2048) takes the model from a Hugging Face config (--hf-config).
    set("training.micro_batches", 16) returns a copy with one field overridden
    (--set); framework= is --framework.
    """

    def __init__(self, source, *, hf_config=None, seq_len=None, framework=None, name=None):
        if isinstance(source, Scenario):
            self._copy_from(source)
            if name is not None:
                self.name = name
            if hf_config is not None:
                self.hf_config = os.fspath(hf_config)
            if seq_len is not None:
                self.seq_len = seq_len
            if framework is not None:
                self.framework = framework
            return
        if isinstance(source, dict):
            self.document = copy.deepcopy(source)
            self.name = name or "<dict>"
        elif isinstance(source, (str, os.PathLike)):
            self.document = None
            self.name = os.fspath(source)
        else:
            raise TypeError("Scenario takes a file path, a dict or a Scenario, not %s"
                            % type(source).__name__)
        self.hf_config = None if hf_config is None else os.fspath(hf_config)
        self.seq_len = seq_len
        self.framework = framework
        self.overrides = []

    def _copy_from(self, other):
        self.document = copy.deepcopy(other.document)
        self.name = other.name
        self.hf_config = other.hf_config
        self.seq_len = other.seq_len
        self.framework = other.framework
        self.overrides = list(other.overrides)

    @classmethod
    def from_file(cls, path):
        return cls(os.fspath(path))

    @classmethod
    def from_dict(cls, document, name="<dict>"):
        return cls(document, name=name)

    @classmethod
    def from_hf_config(cls, base, config, seq_len=None):
        """The scenario `base` (a path, dict or Scenario) with its model read
        from the Hugging Face config.json `config`."""
        scenario = Scenario(base)
        scenario.hf_config = os.fspath(config)
        scenario.seq_len = seq_len
        return scenario

    def set(self, path, value):
        """A copy with the field at the JSON path `path` set to `value` (a
        number, string, bool, list or dict), as --set PATH=VALUE does. A
        string stays a string ("175" is not the number 175)."""
        text = json.dumps(value, allow_nan=False)
        scenario = Scenario(self)
        scenario.overrides.append("%s=%s" % (path, text))
        return scenario

    def args(self, command_args, positional=True):
        """`command_args` with this scenario's arguments added: its name (the
        positional argument, or --scenario NAME when positional is False),
        --set, --hf-config, --seq-len and --framework."""
        out = list(command_args[:1])
        out += [self.name] if positional else ["--scenario", self.name]
        out += command_args[1:]
        for assignment in self.overrides:
            out += ["--set", assignment]
        if self.hf_config is not None:
            out += ["--hf-config", self.hf_config]
        if self.seq_len is not None:
            out += ["--seq-len", str(self.seq_len)]
        if self.framework is not None:
            out += ["--framework", self.framework]
        return out

    def __repr__(self):
        extra = "".join(", set %s" % o for o in self.overrides)
        if self.hf_config:
            extra += ", model from %s" % self.hf_config
        return "Scenario(%s%s)" % (self.name, extra)


def as_scenario(scenario):
    """A Scenario from what the functions accept: a Scenario, a path or a dict."""
    return scenario if isinstance(scenario, Scenario) else Scenario(scenario)
