// Package pubsubfilter parses and evaluates Google Cloud Pub/Sub subscription filters
// (DESIGN section 6): the expression a subscription's "filter" field holds, applied to
// each message's attributes before it is queued for that subscription.
//
// # Grammar
//
// Whitespace (space, tab, CR, LF) may surround any token unless noted. In EBNF:
//
//	filter    = "" | expr .
//	expr      = term { "AND" term } | term { "OR" term } .
//	term      = [ "NOT" | "-" ] primary .
//	primary   = "(" expr ")"
//	          | "attributes" ":" key
//	          | "attributes" "." key ( "=" | "!=" ) string
//	          | "hasPrefix" "(" "attributes" "." key "," string ")" .
//	key       = bare | string .
//	bare      = ( letter | "_" ) { letter | digit | "_" | "-" } .   (ASCII only)
//	string    = '"' { char | escape } '"' .
//
// Meaning, for a message with attributes A:
//
//	attributes:K            K is in A
//	attributes.K = "v"      K is in A and A[K] == "v"
//	attributes.K != "v"     K is not in A, or A[K] != "v"
//	hasPrefix(attributes.K, "p")   K is in A and A[K] starts with "p"
//	NOT x, -x               x is false
//	x AND y, x OR y         as usual; evaluation short-circuits
//
// The empty filter matches every message.
//
// # What Google documents, and this package follows
//
//   - A filter is at most 256 bytes (MaxLen).
//   - The comparison operators are ":", "=" and "!="; "=" and "!=" take a string literal.
//     "!=" also matches messages that lack the attribute (as Google's own fake, pstest,
//     evaluates it).
//   - The boolean operators are AND, OR and NOT, in uppercase; "-" is a unary NOT.
//     AND and OR cannot be mixed in one expression without parentheses:
//     "a AND b OR c" is rejected, "(a AND b) OR c" and "a AND (b OR c)" are not.
//   - hasPrefix is the only function; there are no regular expressions.
//   - Keys and values are case-sensitive. A key with characters other than letters,
//     digits, "-" and "_" must be written as a string literal: attributes:"iana.org/x".
//   - Backslashes, quotation marks and non-printing characters are escaped inside
//     string literals; Unicode, hexadecimal and octal escapes are allowed there.
//
// # Where the docs are silent: the strict reading
//
//   - String literals use double quotes only; single quotes are rejected.
//   - Escapes: \a \b \f \n \r \t \v \\ \" \', \xHH, \ooo (exactly three octal
//     digits), \uHHHH and \UHHHHHHHH (a valid code point, no surrogates). \x and octal
//     escapes are limited to ASCII (at most \x7f, \177), where byte and code-point
//     readings agree; write \u00e9, not \xe9. Raw control characters (below 0x20, and
//     0x7f) inside a string literal must be escaped. The whole filter must be UTF-8.
//   - A bare key starts with an ASCII letter or "_"; keys such as "2fa" or non-ASCII
//     keys are quoted. Keys are never empty. A key may be spelled like a keyword
//     (attributes:AND); its position decides.
//   - "attributes:", "attributes." and "hasPrefix(" are written without whitespace
//     inside them, and "-" touches its operand ("-attributes:k", not "- attributes:k").
//   - AND, OR and NOT are separated from their operands by whitespace, so
//     "(a)AND(b)" and "NOT(a)" are rejected; "NOT (a)" is fine.
//   - One negation per term: "NOT NOT a" and "NOT -a" are rejected, "NOT (NOT a)" is not.
//   - Terms are joined only by AND or OR; there is no implicit AND by juxtaposition.
//   - Parentheses nest at most 32 deep.
//   - A filter of only whitespace is rejected (only "" means "no filter").
//
// Google's Pub/Sub emulator (0.8.20) is no reference here: it stores any filter,
// including unparseable and over-long ones, and never applies it.
package pubsubfilter
