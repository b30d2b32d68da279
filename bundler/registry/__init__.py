"""OCI registries: a bundle pushed as an OCI artifact and pulled back, streamed
(``specs/oci-artifact.md``).

``reference`` parses ``oci://`` references, ``auth`` finds credentials as Docker keeps them,
``http`` speaks the distribution API over the standard library, ``artifact`` maps a bundle to
an image manifest and its layers, ``push`` and ``pull`` move one.
"""
