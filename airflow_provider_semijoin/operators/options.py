"""The job spec's options as operator arguments (:data:`..job.assemble.STEP_OPTIONS`, ``JOB_OPTIONS``).

An operator takes each option under the spec field's name (or the name ``renamed`` gives it,
where the field's own would clash with :class:`BaseOperator`'s: ``params``), at its default on
the Airflow paths (:func:`..job.assemble.option_default`). :func:`declare_options` names them
in ``__init__``'s signature, so Airflow's ``default_args`` reach them and ``help()`` shows them;
:func:`take_options` takes them out of the keyword arguments.
"""

from __future__ import annotations

import dataclasses
import inspect

from airflow.sdk import BaseOperator

from ..job.assemble import option_default


def argument_name(option: dataclasses.Field, renamed: dict[str, str]) -> str:
    return renamed.get(option.name, option.name)


def declare_options(options: tuple[dataclasses.Field, ...], renamed: dict[str, str]):
    """Decorator of an operator's ``__init__(self, *, ..., **kwargs)``: its signature gains a
    keyword argument per option (Airflow fills only the arguments a signature names from ``default_args``)."""
    def declare(init):
        signature = inspect.signature(init)
        *named, rest = signature.parameters.values()
        if rest.kind is not inspect.Parameter.VAR_KEYWORD:
            raise TypeError(f"{init.__qualname__}: expected **kwargs last, to take the spec's options")
        added = []
        for option in options:
            name = argument_name(option, renamed)
            if hasattr(BaseOperator, name):
                raise TypeError(f"{option.name}: an argument of BaseOperator too; give it another name in renamed")
            added.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=option_default(option),
                                          annotation=option.type))
        init.__signature__ = signature.replace(parameters=[*named, *added, rest])
        return init
    return declare


def take_options(kwargs: dict, options: tuple[dataclasses.Field, ...], renamed: dict[str, str]) -> dict:
    """The options popped from ``kwargs``, by argument name; an option not given at its default."""
    return {argument_name(option, renamed): kwargs.pop(argument_name(option, renamed), option_default(option))
            for option in options}


def spec_options(operator, options: tuple[dataclasses.Field, ...], renamed: dict[str, str]) -> dict:
    """The options an operator holds (as attributes of their argument names), by spec field name."""
    return {option.name: getattr(operator, argument_name(option, renamed)) for option in options}
