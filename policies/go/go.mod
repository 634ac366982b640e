module wit_component

go 1.25

require go.bytecodealliance.org/pkg v0.4.0

// Not served by the module proxy these builds reach: the copy in gopkg/
// (see gopkg/VENDORED.md).
replace go.bytecodealliance.org/pkg => ./gopkg
