"""The base of hpctrain's internals: small modules that import nothing of hpctrain but
:mod:`hpctrain.errors`, :mod:`hpctrain._version` and each other (TOML reading, atomic files,
the registries' index, the logger, the current session, trusted reads, the on-disk formats,
text made safe for a terminal, the checkpoint interval). Everything may import them; they
import nothing above them (docs/architecture.md, "The import rule")."""
