#pragma once
// Outputs compared outside the candidate's process: the verifier's harness serializes
// each output of a Python function as "plain data", and this module compares two such values
// with Python's own `==` (and EvalPlus's float rule), in bestofn's process, where nothing the
// candidate runs can reach the expected values or the comparison.
//
// The serialized form is JSON: null, true/false, numbers (an integer within 64 bits, or a finite
// float written as Python's repr writes it), strings and arrays (a Python list) are themselves;
// every JSON object is a tag of one key: {"I": "<hexadecimal>"} an int beyond 64 bits (hex: Python
// writes decimal digits in quadratic time), {"F": "nan" |
// "inf" | "-inf"}, {"T": [...]} a tuple, {"S": [...]} a set, {"Z": [...]} a frozenset,
// {"D": [[key, value], ...]} a dict, {"U": [code points]} a str that UTF-8 cannot hold (lone
// surrogates), {"C": [real, imag]} a complex, {"N": ["numpy.float64", value]} a numpy scalar (its
// type's name and item()'s value: == compares the value, python_type gives the name),
// {"H": [sha256, type, length]} a value too large to send, as the SHA-256 of a key
// that equal values share (outside_tests.cpp's _key): it equals only an H of the same hash.
#include <cstddef>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace bestofn {

// "" when v is well formed (as above, recursively), else what is wrong, in a few words.
std::string check_plain(const nlohmann::json& v);

// Python's a == b for plain data: bool, int and float compare by value across types (an int and a
// float exactly, as Python does, however large the int); list != tuple; a set equals a frozenset
// of the same elements; dicts and sets ignore order. One difference: NaN equals NaN (Python's
// containers do so only for the same object, which two processes cannot share).
bool python_equal(const nlohmann::json& a, const nlohmann::json& b);

// EvalPlus's rule for a differential test (its `_same`, as bestofn's in-process harness had it):
// when `expected` is a float or a non-empty list/tuple of floats, `got` must have as many numbers
// (int or float, not bool), each within atol + 1e-7 * |expected| (atol 1e-6 when the dataset
// gives 0), NaN only where NaN is expected; otherwise python_equal.
bool evalplus_same(const nlohmann::json& got, const nlohmann::json& expected, double atol);

// HumanEval/32 (find_zero)'s oracle: |sum(c * x**k for k, c in enumerate(xs))| <= atol, in double
// and in Python 3.11's order (sum left to right, pow from libm). x must be a number.
bool find_zero_ok(const nlohmann::json& xs, const nlohmann::json& x, double atol);

// ---- what EvalPlus's own checker (evalplus/eval/__init__.py, 0.3.1) does with two outputs ----

// Python's type(v).__name__ for a plain value ("int", "float", "list", "tuple", ..., "NoneType").
std::string python_type(const nlohmann::json& v);

// Whether v holds a NaN anywhere (a float, a complex part, inside any container).
bool holds_nan(const nlohmann::json& v);

// numpy.allclose(a, b, rtol, atol) (a the output, b the expected): both converted to arrays as
// numpy converts nested lists and tuples of numbers (bool, int within 64 bits, float, complex),
// broadcast by numpy's rules, every |a - b| <= atol + rtol * |b| (infinities equal only to
// themselves, NaN to nothing). False wherever numpy raises: a ragged nesting, shapes that do not
// broadcast, a leaf numpy keeps as an object (None, str, dict, set, an int beyond 64 bits).
bool numpy_allclose(const nlohmann::json& a, const nlohmann::json& b, double rtol, double atol);

// Python's set(a) == set(b): nullopt where Python raises (a not iterable, an unhashable element).
std::optional<bool> python_set_equal(const nlohmann::json& a, const nlohmann::json& b);

// Python's float(v) for a number (bool, int, float): false for anything else, or an int beyond a double.
bool plain_to_double(const nlohmann::json& v, double& out);

// A text that two plain values share exactly when python_equal says they are equal (numbers by
// value, sets and dicts in a sorted order; an H value by its hash): for grouping outputs.
std::string equality_key(const nlohmann::json& v);

// Python's repr of a plain value, cut to at most max_chars characters (as '%.200r' cuts).
std::string python_repr(const nlohmann::json& v, std::size_t max_chars = 200);

}  // namespace bestofn
