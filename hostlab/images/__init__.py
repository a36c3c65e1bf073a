"""Images: `invoke build` (`build`), the builders behind one interface (`builders`), the stand-in base made from
Debian's archive (`standin`), the hand-over from buildah to the Docker engine (`handover`), the `.env` that ties
Compose to the image built (`compose`), the byte-for-byte record and the comparison with it (`record`), which layer
and files differ between two images (`diff`), the reproducibility check (`reproducible`), and the image's own
compile copied out for a venv (`sourcewheels`). Imports hostlab.host, hostlab.locks and hostlab.kernels below it."""
