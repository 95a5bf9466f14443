#!/usr/bin/perl
# Doxygen input filter for the markdown pages (docs/Doxyfile, FILTER_PATTERNS).
#
# The pages are written to read well on GitHub: they link to source lines with relative paths
# such as ../include/glass/attention.hpp#L42-L54. In the Doxygen site those files live elsewhere,
# so this filter rewrites each relative link before Doxygen reads the page:
#   include/glass/NAME.hpp#L42-L54  ->  the annotated source page, at line 42
#   include/glass/NAME.hpp          ->  the header's documentation page
#   cuda/NAME.cu#L42-L54, cuda/NAME.cu (also .cuh, .hpp, .cpp; and emulator/NAME.hpp, .cpp)
#                                   ->  the same, for the CUDA twin's and the emulator's files
#   examples/NN_name.cpp            ->  the example's page
#   NAME.dox (a page written for Doxygen) ->  that page
#   any other file in the repository (tests/, data/, cuda/CMakeLists.txt, ...) -> its path as
#   plain code text, since the site does not contain it.
# Links to other markdown pages (01-tokenize.md) and web addresses are left for Doxygen.
use strict;
use warnings;

# Doxygen's page name for a file: its base name, escaped ("_" -> "__", "." -> "_8").
sub doxygen_name {
    my ($name) = @_;
    $name =~ s{^.*/}{};
    $name =~ s/_/__/g;
    $name =~ s/\./_8/g;
    return $name;
}

while (my $line = <>) {
    $line =~ s{\]\((?:\.\./)*include/glass/([A-Za-z0-9_/]+\.hpp)#L(\d+)(?:-L\d+)?\)}
              {"](" . doxygen_name($1) . "_source.html#l" . sprintf("%05d", $2) . ")"}ge;
    $line =~ s{\]\((?:\.\./)*include/glass/([A-Za-z0-9_/]+\.hpp)\)}
              {"](" . doxygen_name($1) . ".html)"}ge;
    # cuda/ and emulator/ files on the site (docs/Doxyfile: not the emulator's stand-ins in
    # emulator/include/, nor emulator/cublas.cpp, nor its tests).
    my $cuda = qr{(?:\.\./)*(?:cuda|emulator)/((?!cublas\.cpp)[A-Za-z0-9_]+\.(?:cu|cuh|hpp|cpp))};
    $line =~ s{\]\($cuda#L(\d+)(?:-L\d+)?\)}
              {"](" . doxygen_name($1) . "_source.html#l" . sprintf("%05d", $2) . ")"}ge;
    $line =~ s{\]\($cuda\)}{"](" . doxygen_name($1) . ".html)"}ge;
    $line =~ s{\]\((?:\.\./)*examples/([A-Za-z0-9_]+\.cpp)(?:#L\d+(?:-L\d+)?)?\)}
              {"](" . ($1 =~ s/\./_8/r) . "-example.html)"}ge;  # example pages keep "_"
    # A page written as a .dox file (docs/pages/dataflow.dox) is the Doxygen page of that name.
    $line =~ s{\]\(([A-Za-z0-9_]+)\.dox\)}{]($1.html)}g;
    # Remaining relative links to repository files that are not pages of the site.
    $line =~ s{\[([^\]]+)\]\(((?:\.\./)*(?:tests|cuda|emulator|data|tools|scripts|bench|models|examples|include)/[^)#\s]*)(?:#[^)\s]*)?\)}
              {"$1 (`" . $2 =~ s{^(?:\.\./)+}{}r . "`)"}ge;
    print $line;
}
