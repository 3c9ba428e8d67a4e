"""What a job file may hold where it reaches the batch script or spec.toml: ``[env]``
names and values, one-line strings in the script's sections, no credentials in
``[config]`` (redacted from a Python ``train_loop_config``)."""
from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional

from ..errors import ConfigError
from ..common.tomlfile import kind_name as _kind
from ..common.tomlfile import show_value as _show
from ..callbacks import CREDENTIAL_RE

if TYPE_CHECKING:
    from .sections import Ctx

#: An ``[env]`` name (JSON Schema's ``propertyNames`` too).
ENV_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"
ENV_NAME = re.compile(ENV_NAME_PATTERN)


def check_env(ctx: Ctx, table: Any) -> Dict[str, str]:
    """``[env]``: variable names → string values."""
    if not isinstance(table, dict):
        raise ctx.error("env", f"expected a table ([env] section), got {_show(table)} "
                        f"({_kind(table)})")
    out: Dict[str, str] = {}
    for name, value in table.items():
        if not ENV_NAME.fullmatch(name):
            raise ctx.error(f"env.{name}", "not a valid environment variable name",
                            "letters, digits and _, not starting with a digit")
        if not isinstance(value, str):
            raise ctx.error(f"env.{name}", f"expected a string, got {_show(value)} "
                            f"({_kind(value)})", f'quote it: {name} = "{_show(value)}"'
                            if not isinstance(value, (dict, list)) else None)
        if script_value_problem(value) is not None:
            raise ctx.error(f"env.{name}", "a newline, carriage return or NUL byte cannot go "
                            "into a variable exported by the batch script",
                            "remove the line break; a value that needs one is read from a "
                            "file in the training function")
        if _is_credential(name) and not _ENV_REF.fullmatch(value):
            raise ctx.error(f"env.{name}", "looks like a credential: it would be written "
                            "into spec.toml and the batch script",
                            f"export {name} in the shell that submits the job (Slurm passes "
                            "its environment on), or source a file only you can read in "
                            "[setup] commands")
        m = _URL_USERINFO.match(value)
        if m and not _ENV_REF.fullmatch(m.group(1)):
            raise ctx.error(f"env.{name}", "holds a password in a URL (scheme://user:"
                            "password@host): it would be written into spec.toml and the "
                            "batch script",
                            f"export {name} in the shell that submits the job and write "
                            f'{name} = "${name}", or put a reference in its place: '
                            '"https://user:${MY_PASSWORD}@host"')
        out[name] = value
    return out


_ENV_REF = re.compile(r"^\$(\{[A-Za-z_][A-Za-z0-9_]*\}|[A-Za-z_][A-Za-z0-9_]*)$")
#: ``scheme://user:password@`` at the start of a value; group 1: the password.
_URL_USERINFO = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://[^/@:\s]*:([^/@\s]*)@")


def _is_credential(name: str) -> bool:
    """``WANDB_API_KEY``, ``MLFLOW_TRACKING_PASSWORD``, ``HF_TOKEN``… (a reference such as
    ``"$WANDB_API_KEY"`` is fine: the value stays out of the files)."""
    return bool(CREDENTIAL_RE.search(name))


# --------------------------------------------------------------------------- script values
#: What no value may hold once it reaches a batch script: a line break starts a new
#: command (also inside a comment), and bash's handling of NUL differs between versions.
_LINE_BREAKING = {"\n": "a newline (LF)", "\r": "a carriage return (CR)", "\0": "a NUL byte"}


def script_value_problem(value: str) -> Optional[str]:
    """What makes ``value`` unfit for a batch script (a line break or NUL), or None.

    >>> script_value_problem("--cpu-bind=cores") is None
    True
    >>> script_value_problem("x\\necho hi")
    'a newline (LF)'
    """
    found = [what for c, what in _LINE_BREAKING.items() if c in value]
    return " and ".join(found) if found else None


#: What a few keys expect, and how to fix them, for :func:`check_script_value`'s error.
SCRIPT_VALUE_HELP = {
    "scheduler.launcher_args": ("one launcher argument per entry, on a single line",
                                "give each argument as an entry of its own: launcher_args "
                                '= ["--cpu-bind=cores", "--exclusive"]'),
    "scheduler.python": ("the path of a Python interpreter (a single line)",
                         'e.g. python = "/opt/venv/bin/python"'),
    "setup.commands": ("one shell line per entry",
                       "give several entries instead of one with newlines"),
    "setup.modules": ("a non-empty single line", None),
}


def check_script_value(value: Any, key: str, *, file: Optional[str] = None,
                       expected: Optional[str] = None, hint: Optional[str] = None) -> Any:
    """The one check of every value that reaches a batch script (directives, modules,
    set-up lines, ``[env]``, launcher arguments, the interpreter, paths, the job name,
    anything in the template's context): CR, LF and NUL are refused, with an error naming
    ``key`` (and ``file``, the job file or override that set it), what was expected and
    how to fix it. Returns ``value``.

    >>> check_script_value("x\\nid", "scheduler.python", file="job.toml")
    Traceback (most recent call last):
    ...
    hpctrain.errors.ConfigError: job.toml: scheduler.python: expected the path of a Python interpreter (a single line), got 'x\\nid', which holds a newline (LF): in the batch script it would start a new command
    HINT: e.g. python = "/opt/venv/bin/python"
    """
    if isinstance(value, str):
        problem = script_value_problem(value)
        if problem is not None:
            own_expected, own_hint = SCRIPT_VALUE_HELP.get(re.sub(r"\[\d+\]$", "", key),
                                                           (None, None))
            raise ConfigError(
                f"{key}: expected {expected or own_expected or 'a single line'}, got "
                f"{value!r}, which holds {problem}: in the batch script it would start a "
                "new command", file=file,
                hint=hint or own_hint or 'remove it (in TOML a "\\n" escape or a multi-line '
                                         '"""string""" puts a line break in a value)')
    return value


#: The sections whose values reach the batch script as shell text, directives or comments
#: (not only inside the embedded spec, a quoted heredoc of TOML where "\n" stays escaped).
SCRIPT_SECTIONS = ("scaling", "run", "failure", "scheduler", "setup", "container", "env")
#: Keys whose own check refuses line breaks already, with its own words: the directives
#: (:func:`hpctrain.schedulers.base.check_directive`) and ``[env]`` (:func:`check_env`).
_OWN_SCRIPT_CHECK = ("scheduler.directives", "env")


def check_script_values(ctx: Ctx, data: Mapping[str, Any]) -> None:
    """Every string of the sections that reach the batch script is one line: CR, LF and
    NUL are refused here (:func:`check_script_value`), naming the key and the file (or
    override) that set it; the renderer checks its whole context again
    (:func:`hpctrain.schedulers.base.check_script_context`)."""
    def check(key: str, where: str, value: Any) -> None:
        if isinstance(value, str):
            check_script_value(value, key, file=ctx.where(where))
        elif isinstance(value, list):
            for i, item in enumerate(value):
                check(f"{key}[{i}]", where, item)
        elif isinstance(value, dict):
            for sub, item in value.items():
                check(f"{key}.{sub}", f"{where}.{sub}", item)

    for section in SCRIPT_SECTIONS:
        table = data.get(section)
        if section in _OWN_SCRIPT_CHECK or not isinstance(table, dict):
            continue
        for key, value in table.items():
            if f"{section}.{key}" not in _OWN_SCRIPT_CHECK:
                check(f"{section}.{key}", f"{section}.{key}", value)


#: What spec.toml and the batch script hold in place of a credential-looking value of a
#: train_loop_config given in Python (the workers get the real one, from the payload).
REDACTED = "<redacted: credential-looking key>"
#: Words of a [config] key that name a secret wherever they stand (``db_password``).
_SECRET_WORDS = {"password", "passwd", "passphrase", "secret", "secrets", "credential",
                 "credentials", "apikey", "apitoken", "accesstoken", "authtoken",
                 "secretkey", "accesskey", "privatekey"}
#: ``<word>_key`` pairs that name a secret (``api_key``, ``access_key``…).
_KEY_WORDS = {"api", "access", "secret", "private", "auth", "license", "signing",
              "encryption", "client", "account", "service"}
#: ``<word>_token`` of a tokenizer (``pad_token = "<pad>"``), not a credential.
_TOKENIZER_WORDS = {"pad", "bos", "eos", "unk", "sep", "cls", "mask", "start", "end", "stop",
                    "special", "additional", "max", "min", "num", "image", "vision", "audio",
                    "video", "eot", "sot", "begin", "new", "first", "last", "decoder"}
#: A key ending in one of these names where a secret is, not the secret
#: (``api_key_file``, ``token_env``, ``secret_name``).
_POINTER_WORDS = {"file", "path", "dir", "env", "var", "name", "id", "length", "len",
                  "size", "count", "type", "kind"}


def _key_words(name: str) -> List[str]:
    """``"wandb.apiKey"`` → ``["wandb", "api", "key"]``."""
    spaced = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", str(name))
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", spaced).lower()
    return [w for w in re.split(r"[^a-z0-9]+", spaced) if w]


def is_credential_key(name: str) -> bool:
    """Whether a ``[config]`` key names a secret: ``api_key``, ``hf_token``, ``apiKey``,
    ``db_password``, ``client_secret``… but not ``tokenizer``, ``max_tokens``,
    ``pad_token`` or ``api_key_file`` (where the secret is: the way to give one).

    >>> [n for n in ("api_key", "apiKey", "hf_token", "token", "db_password", "tokenizer",
    ...              "pad_token", "max_new_tokens", "api_key_file", "WANDB_API_KEY")
    ...  if is_credential_key(n)]
    ['api_key', 'apiKey', 'hf_token', 'token', 'db_password', 'WANDB_API_KEY']
    """
    words = _key_words(name)
    if not words or words[-1] in _POINTER_WORDS:
        return False
    if any(w in _SECRET_WORDS for w in words):
        return True
    if any(a in _KEY_WORDS and b == "key" for a, b in zip(words, words[1:])):
        return True
    return words[-1] == "token" and (len(words) == 1 or words[-2] not in _TOKENIZER_WORDS)


def _holds_text(value: Any) -> bool:
    """A non-empty string, or a table/array holding one (numbers and booleans are no
    secrets: ``use_auth_token = true``)."""
    if isinstance(value, str):
        return value != "" and value != REDACTED
    if isinstance(value, dict):
        return any(_holds_text(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_holds_text(v) for v in value)
    return False


def _credential_paths(value: Any, path: str = "") -> List[str]:
    """The dotted paths (under ``path``) of credential-looking keys holding text."""
    out: List[str] = []
    if isinstance(value, Mapping):
        for k, v in value.items():
            key = f"{path}.{k}" if path else str(k)
            if is_credential_key(str(k)) and _holds_text(v):
                out.append(key)
            else:
                out.extend(_credential_paths(v, key))
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            out.extend(_credential_paths(v, f"{path}[{i}]"))
    return out


def redact_config(value: Any) -> Any:
    """``value`` (a train_loop_config) with the text under each credential-looking key
    replaced by :data:`REDACTED`: what spec.toml and the batch script hold."""
    if isinstance(value, Mapping):
        return {k: REDACTED if is_credential_key(str(k)) and _holds_text(v)
                else redact_config(v) for k, v in value.items()}
    if isinstance(value, list):
        return [redact_config(v) for v in value]
    if isinstance(value, tuple):
        return tuple(redact_config(v) for v in value)
    return value


def check_config(ctx: Ctx, table: Any) -> None:
    """``[config]`` of a job file or site config (and ``--set config.x=...``): a
    credential-looking key holding text is refused, as in ``[env]``: it would be copied
    into spec.toml and the batch script. (A train_loop_config given in Python is redacted
    there instead, :func:`redact_config`: Ray programs pass one freely.)"""
    if not isinstance(table, Mapping):
        return  # spec_from_dict says what a [config] section must be
    for path in _credential_paths(table):
        leaf = re.split(r"[.\[]", path)[-1]
        var = "_".join(_key_words(re.sub(r"\[\d+\]", "", path))).upper()
        raise ctx.error(
            f"config.{path}", "looks like a credential: it would be written into spec.toml "
            "and the batch script (and shown in their comments)",
            f'read it in the training function instead: os.environ["{var}"] (export {var} '
            "in the shell that submits the job; Slurm passes its environment on), or give "
            f'the path of a file only you can read (mode 0600): {leaf}_file = "~/.{leaf}"')

