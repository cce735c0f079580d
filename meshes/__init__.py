"""gmsh geometry generators producing .msh files (no solving here)."""
