#!/usr/bin/perl
# The part of `docs/build-docs.sh --check` (ctest test `docs`) that reads the built pages the way a
# reader sees them. Usage: perl docs/check_pages.pl HTML_DIR. Prints each problem; exit 1 if any.
#
#   1. No documentation page shows a literal "///" or "//!". Doxygen strips the comment markers of
#      a "///" block, except inside \verbatim, which keeps every line as written: a description
#      block in \verbatim shows "///" on each line. (A ```text fence renders cleanly.) Pages that
#      show a file's source verbatim are exempt: the annotated sources (*_source.html) and the
#      examples (*-example.html).
#   2. No brief description is cut mid-phrase: a brief (the one-line summaries in the file, class
#      and member lists) ending in a hyphen, a dash or a comma lost the rest of its sentence to a
#      line break or to the next command.
#   3. Every link from one page of the site to another lands: the page exists, and a line anchor
#      into an annotated source (#l00042, from docs/md_filter.pl) names a line of that file.
use strict;
use warnings;

binmode(STDOUT, ':encoding(UTF-8)');
my $dir = shift or die "usage: check_pages.pl HTML_DIR\n";
opendir(my $dh, $dir) or die "cannot open $dir: $!\n";
my @pages = sort grep { /\.html$/ } readdir($dh);
closedir($dh);

sub slurp {
    my ($path) = @_;
    open(my $fh, '<:encoding(UTF-8)', $path) or die "cannot read $path: $!\n";
    local $/;
    return <$fh>;
}

# What a browser shows of some HTML: no scripts, no tags, entities decoded.
sub visible_text {
    my ($html) = @_;
    $html =~ s{<script\b.*?</script>}{}gs;
    $html =~ s{<style\b.*?</style>}{}gs;
    $html =~ s{<[^>]*>}{}gs;
    $html =~ s{&#(\d+);}{chr($1)}ge;
    $html =~ s{&#x([0-9a-fA-F]+);}{chr(hex($1))}ge;
    my %entity = (lt => '<', gt => '>', amp => '&', quot => '"', nbsp => ' ', apos => "'");
    $html =~ s{&(lt|gt|amp|quot|nbsp|apos);}{$entity{$1}}g;
    return $html;
}

my $problems = 0;
sub problem { print "docs check: $_[0]\n"; $problems++; }

my %anchors;  # page -> { anchor => 1 }, read on demand
sub has_anchor {
    my ($page, $anchor) = @_;
    if (!$anchors{$page}) {
        my $html = slurp("$dir/$page");
        $anchors{$page} = { map { $_ => 1 } ($html =~ /\b(?:id|name)="([^"]+)"/g) };
    }
    return $anchors{$page}{$anchor};
}

for my $page (@pages) {
    my $html = slurp("$dir/$page");

    # 1. Literal comment markers.
    if ($page !~ /_source\.html$/ && $page !~ /-example\.html$/) {
        my $text = visible_text($html);
        while ($text =~ m{^(.*?(///|//!).*)$}mg) {
            my $line = $1;
            $line =~ s/^\s+|\s+$//g;
            problem("$page shows a literal \"$2\": \"" . substr($line, 0, 100) . "\"");
            last;
        }
    }

    # 2. Briefs: the summary cells of the file, class and member lists.
    while ($html =~ m{<td class="(?:desc|mdescRight)">(.*?)</td>}gs) {
        my $brief = visible_text($1);
        $brief =~ s/More\.\.\.\s*$//;
        $brief =~ s/^\s+|\s+$//g;
        next if $brief eq '';
        if ($brief =~ /[-,\x{2013}\x{2014}]$/) {
            problem("$page: a brief is cut mid-phrase: \"" . substr($brief, -100) . "\"");
        }
    }

    # 3. Links between pages.
    while ($html =~ m{\bhref="([^"#:?/]+\.html)(?:#([^"]*))?"}g) {
        my ($target, $anchor) = ($1, $2);
        if (!-f "$dir/$target") {
            problem("$page links to $target, which the site does not have");
        } elsif (defined $anchor && $anchor =~ /^l\d+$/ && !has_anchor($target, $anchor)) {
            problem("$page links to line $anchor of $target, which has no such line");
        }
    }
}
exit($problems ? 1 : 0);
