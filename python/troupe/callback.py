"""mx.callback: what Module.fit calls after batches and epochs."""
import logging
import time

from .model import save_checkpoint


class Speedometer:
    """Logs samples per second (and the metric) every `frequent` batches."""

    def __init__(self, batch_size, frequent=50, auto_reset=True):
        self.batch_size, self.frequent, self.auto_reset = batch_size, frequent, auto_reset
        self.init, self.tic, self.last_count = False, 0, 0

    def __call__(self, param):
        count = param.nbatch
        if self.last_count > count:
            self.init = False
        self.last_count = count
        if self.init:
            if count % self.frequent == 0:
                speed = self.frequent * self.batch_size / (time.time() - self.tic)
                msg = "Epoch[%d] Batch [%d]\tSpeed: %.2f samples/sec" % (param.epoch, count, speed)
                if param.eval_metric is not None:
                    pairs = param.eval_metric.get_name_value()
                    if self.auto_reset:
                        param.eval_metric.reset_local()
                    msg += "".join("\t%s=%f" % p for p in pairs)
                logging.info(msg)
                self.tic = time.time()
        else:
            self.init = True
            self.tic = time.time()


def do_checkpoint(prefix, period=1):
    """An epoch-end callback that saves a checkpoint every `period` epochs."""
    period = int(max(1, period))

    def _callback(iter_no, sym, arg, aux):
        if (iter_no + 1) % period == 0:
            save_checkpoint(prefix, iter_no + 1, sym, arg, aux)
    return _callback


def log_train_metric(period, auto_reset=False):
    def _callback(param):
        if param.nbatch % period == 0 and param.eval_metric is not None:
            for name, value in param.eval_metric.get_name_value():
                logging.info("Iter[%d] Batch[%d] Train-%s=%f", param.epoch, param.nbatch, name, value)
            if auto_reset:
                param.eval_metric.reset_local()
    return _callback


class ProgressBar:
    def __init__(self, total, length=80):
        self.total, self.bar_len = total, length

    def __call__(self, param):
        filled = int(round(self.bar_len * param.nbatch / float(self.total)))
        logging.info("[%s] %s%s\r", "=" * filled + "-" * (self.bar_len - filled),
                     round(100.0 * param.nbatch / float(self.total), 1), "%")


class LogValidationMetricsCallback:
    def __call__(self, param):
        if param.eval_metric is None:
            return
        for name, value in param.eval_metric.get_name_value():
            logging.info("Epoch[%d] Validation-%s=%f", param.epoch, name, value)
