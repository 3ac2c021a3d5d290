"""graphnn.passes: Graph -> Graph optimization passes (canonicalization, fusion, autodiff,
memory planning). Each pass lives in its own file; passes import only graphnn.ir."""
