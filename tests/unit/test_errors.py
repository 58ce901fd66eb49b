"""The one line a run's summaries quote for an error (`status_reason`, job_result.txt, error.txt, the
report): the exception's type and the first meaningful line of its message, from real traceback texts."""

import traceback

import pytest

from parallel_steps.errors import error_line, signature

#: What a worker sends back when the real SDK's `Model.get_model_path` fails in init() (captured from
#: azureml-core 1.61): the message runs on for eight lines and ends in a JSON block.
AZUREML_MODEL_NOT_FOUND = """Traceback (most recent call last):
  File "/work/Code/digit_identification.py", line 13, in init
    model_path = Model.get_model_path("mnist")
  File "/venv/lib/python3.11/site-packages/azureml/core/model.py", line 809, in get_model_path
    return Model._get_model_path_local(model_name, version)
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/venv/lib/python3.11/site-packages/azureml/core/model.py", line 872, in _get_model_path_local_from_root
    raise ModelNotFoundException("Model {} not found in cache at {} or in current working directory {}. "
azureml.exceptions._azureml_exception.ModelNotFoundException: ModelNotFoundException:
\tMessage: Model mnist not found in cache at azureml-models or in current working directory /tmp.
\tInnerException None
\tErrorResponse\x20
{
    "error": {
        "message": "Model mnist not found in cache at azureml-models or in current working directory /tmp."
    }
}
"""


def raised(function) -> str:
    """The traceback text of what `function` raises, as a worker formats it."""
    try:
        function()
    except BaseException as exc:
        return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    raise AssertionError("nothing raised")


def fail(exc: BaseException):
    def function():
        raise exc

    return function


def chained():
    try:
        {}["model"]
    except KeyError as exc:
        raise RuntimeError("could not load the model\nsee the log for details") from exc


def test_the_sdk_exception_is_named_by_its_type_and_its_message_not_the_closing_brace():
    assert error_line(AZUREML_MODEL_NOT_FOUND) == (
        "ModelNotFoundException: Model mnist not found in cache at azureml-models or in current working directory /tmp."
    )


@pytest.mark.parametrize(
    ("function", "line"),
    [
        (fail(ValueError("bad row 7\nthe rest of the message\n}")), "ValueError: bad row 7"),
        (fail(KeyError("img_0042.png")), "KeyError: 'img_0042.png'"),
        (fail(ZeroDivisionError()), "ZeroDivisionError"),
        (fail(OSError(2, "No such file or directory")), "FileNotFoundError: [Errno 2] No such file or directory"),
        (chained, "RuntimeError: could not load the model"),  # the exception raised last, not its cause
        (lambda: compile("def f(:\n", "score.py", "exec"), "SyntaxError: invalid syntax"),
    ],
)
def test_a_traceback_gives_its_exception_type_and_first_message_line(function, line):
    assert error_line(raised(function)) == line


def test_text_that_is_not_a_traceback_gives_its_first_meaningful_line():
    assert error_line("\n{\ncrashed: SIGKILL(-9)\nmore\n") == "crashed: SIGKILL(-9)"
    assert error_line("   ") == "unknown error"


def test_the_same_sdk_error_on_two_machines_is_one_error_group():
    other = AZUREML_MODEL_NOT_FOUND.replace("/tmp", "/mnt/batch/tasks/wd")
    assert signature(other) == signature(AZUREML_MODEL_NOT_FOUND)
    assert signature(raised(fail(ValueError("x")))) != signature(AZUREML_MODEL_NOT_FOUND)
