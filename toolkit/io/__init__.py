"""Saving and loading statistics Datasets as NetCDF: :func:`save` and :func:`load`.

Two jobs, two modules: the NetCDF codec (:mod:`toolkit.io.netcdf`: attrs
encoded so they round-trip, atomic writes) and the defence of ``load``
against hostile or damaged files (:mod:`toolkit.io.hostile`); the output
path checks the command lines share are in :mod:`toolkit.io.paths`.
"""

from toolkit.io.hostile import describe_file, format_version
from toolkit.io.netcdf import FORMAT_VERSION, decode_from_netcdf, encode_for_netcdf, load, save
from toolkit.io.paths import check_output_path

__all__ = ["FORMAT_VERSION", "check_output_path", "decode_from_netcdf", "describe_file", "encode_for_netcdf",
           "format_version", "load", "save"]
