"""Failures in the JVM are reported by Iceberg's own message, not py4j's wrapper text."""

from jobkit.spark import error_message


class _Class:
    def __init__(self, name):
        self._name = name

    def getName(self):
        return self._name


class _Throwable:
    def __init__(self, name, message, cause=None):
        self._class, self._message, self._cause = _Class(name), message, cause

    def getClass(self):
        return self._class

    def getMessage(self):
        return self._message

    def getCause(self):
        return self._cause

    def equals(self, other):
        return self is other


class _Py4JError(Exception):
    def __init__(self, java_exception):
        super().__init__("An error occurred while calling o123.sql.\n: java.lang.Runtime...")
        self.java_exception = java_exception


def test_the_innermost_iceberg_cause_comes_first():
    root = _Throwable(
        "org.apache.iceberg.exceptions.ValidationException",
        "Cannot commit, found new position delete for replaced data file: x.parquet",
    )
    outer = _Throwable("java.lang.RuntimeException", "Cannot commit rewrite", root)
    message = error_message(_Py4JError(outer))
    assert message.startswith(
        "org.apache.iceberg.exceptions.ValidationException: Cannot commit, found new position"
    )
    assert "(in java.lang.RuntimeException: Cannot commit rewrite)" in message
    assert "o123" not in message


def test_a_plain_exception_is_its_first_line():
    assert error_message(ValueError("bad value\nmore detail")) == "ValueError: bad value"


def test_messages_stay_on_one_bounded_line():
    java = _Throwable("org.apache.iceberg.exceptions.ValidationException", "missing\n" * 500)
    message = error_message(_Py4JError(java))
    assert "\n" not in message and len(message) <= 1000
