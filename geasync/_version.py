"""geasync's version, in one place: the package reports it and the native extension is built with it compiled in
(``ga_version``), so an extension left from another version is refused at load, not trusted."""

__version__ = "0.1.0"
