# Sourced (not run) by scripts/quickstart.sh and scripts/test.sh from the repository root: picks
# the Python environment and installs requirements.txt into it; afterwards `python` is that environment's.
#
# Inside a virtual environment (an activated venv, or a python on PATH that is one): use it, as before.
# Otherwise: create the project environment .venv/ (once) and use it. Installing into whatever python
# is first on PATH fails on a PEP 668 ("externally-managed-environment") system Python, and elsewhere
# it mixes this project's pins into the user's system packages; a venv avoids both.
#
# .venv/ is made with --system-site-packages so that packages the machine already has (above all
# torch, a ~200 MB wheel that takes minutes to install) are reused rather than installed a second
# time. The pins still hold: pip install -r requirements.txt inside the venv is a no-op when the
# system's versions satisfy them, and otherwise installs the pinned version into .venv/, where it
# shadows the system's. pip never writes to the system Python from inside a venv, so a PEP 668
# marker on it does not matter.

_env_python=python3
command -v python3 >/dev/null 2>&1 || _env_python=python

if [ -n "${VIRTUAL_ENV:-}" ] || "$_env_python" -c 'import sys; sys.exit(sys.prefix == sys.base_prefix)'; then
    echo "using the active virtual environment $("$_env_python" -c 'import sys; print(sys.prefix)')"
else
    # a .venv/ whose python no longer runs (its base Python moved or was removed) is rebuilt
    if .venv/bin/python -c '' >/dev/null 2>&1; then
        echo "using the project environment .venv/ (already there); activate it later with: source .venv/bin/activate"
    else
        # said before the venv and the pip check that follow, which take seconds to minutes without a word
        echo "using the project environment .venv/ (creating it now, then installing requirements.txt into it);" \
             "activate it later with: source .venv/bin/activate"
        if ! "$_env_python" -m venv --clear --system-site-packages .venv; then
            rm -rf .venv  # a half-made one (e.g. without pip) would be taken as ready next time
            echo "could not create .venv/ with '$_env_python -m venv'; on Debian/Ubuntu install python3-venv" \
                 "(apt install python3-venv), or activate a virtual environment of your own and run again" >&2
            exit 1
        fi
    fi
    export VIRTUAL_ENV="$PWD/.venv"
    export PATH="$VIRTUAL_ENV/bin:$PATH"
    hash -r
fi
unset _env_python

# no check for a newer pip: that is a network call, and the notice is noise on an offline machine
python -m pip install -q --disable-pip-version-check -r requirements.txt
