// Placeholder: this part of the io module lands with the rest of the data-loading work (issue 5).
