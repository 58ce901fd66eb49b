"""The project's version, in one place: the build reads it, `parallel-steps --version` prints it, and it is
part of the reuse key. A leaf module, so the modules that need it do not import the package's facade."""

__version__ = "0.1.0"
