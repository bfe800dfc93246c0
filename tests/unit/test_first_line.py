"""errors.first_line and named_first_line: what a one-line refusal or a record
quotes of an error."""

from orchestrator.errors import first_line, named_first_line


def test_an_errors_first_line_skips_blank_lines_and_drops_the_advice():
    cuda = RuntimeError("\nFound no NVIDIA driver on your system. Please check that you\n"
                        "have an NVIDIA GPU and installed a driver from http://www.nvidia.com")
    assert first_line(cuda) == "Found no NVIDIA driver on your system. Please check that you"
    assert first_line(ValueError("one line")) == "one line"


def test_an_error_without_words_is_named_by_its_type():
    assert first_line(KeyboardInterrupt()) == "KeyboardInterrupt"
    assert first_line(OSError(" \n\t\n")) == "OSError"
    assert named_first_line(ValueError()) == "ValueError"
    assert named_first_line(ValueError("\nbad shape\nadvice")) == "ValueError: bad shape"
