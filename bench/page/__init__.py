"""The page (REPRODUCED.md) and the evidence behind it: built from every paper's declarations in bench/report/ on
the committed evidence/ folder, above the reports (docs/reports.md, "REPRODUCED.md")."""
