"""The test suite, laid out like the package: ``tests/<package>/test_<module>.py`` tests ``comlrl_lightning/<package>/<module>.py``."""
