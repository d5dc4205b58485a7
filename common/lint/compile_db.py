"""The build's compile_commands.json, for the checks that rerun a source's compile command."""
import json
import os
import shlex


def load(build_dir):
    """The entries of BUILD_DIR/compile_commands.json; raises OSError or ValueError, naming the file."""
    path = os.path.join(build_dir, "compile_commands.json")
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        raise type(e)(f"cannot read {path}: {e}") from e


def compile_args(entry):
    """The entry's compiler and flags, without its source, output and dependency-file options."""
    args = entry.get("arguments") or shlex.split(entry["command"])
    out = [args[0]]
    skip = False
    for a in args[1:]:
        if skip:
            skip = False
            continue
        if a in ("-o", "-c", "-MF", "-MT", "-MQ"):
            skip = True  # the flag and its value
            continue
        if a in ("-MD", "-MMD") or a == entry["file"]:
            continue
        out.append(a)
    return out
